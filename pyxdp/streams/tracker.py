# SPDX-License-Identifier: Apache-2.0
"""The token streams of the host's connections, from the bytes each process
read and wrote (docs/spec.md §11): one HTTP/1.1 parser per direction of a
connection, a stream per event-stream response (several in turn on a
keep-alive connection), its chunks, gaps, stalls and end. Pure: the kernel
side (pyxdp.streams probes) calls describe/data/closed/process_exited.

One connection, one record: a socket held by several processes (a fork, a
descriptor passed on) is one connection under several keys, ended once,
when the last of them lets it go; an evicted connection is ignored until
its descriptor is closed, never joined again mid-way.

Privacy: the objects returned hold counts, times, addresses, process and
model names only; no byte of a prompt or a completion is kept past the
parser's bounded line buffer.
"""

from collections import OrderedDict, deque

from pyxdp.human import escaped
from pyxdp.streams import api_events, http1, http2, identity
from pyxdp.streams.gaps import Gaps

_COMM_MAX = 32
_MAX_PENDING = 16  # requests awaiting their response on one connection
# Evicted connections remembered (each a key and a socket number) per
# tracked one, until their close: beyond, the oldest is forgotten, and a
# later byte of it may again begin a stream joined mid-way.
_EVICTED_PER_STREAM = 8
# HTTP/2 stream ids followed at once on one connection (both directions'
# parsers follow http2.MAX_STREAMS each); beyond, the oldest is evicted.
_H2_EXCHANGES = 2 * http2.MAX_STREAMS
_GRPC_CHUNK = (api_events.CHUNK, "grpc", None, None, 0)  # a gRPC message, as an event
_GRPC_METHOD_MAX = 128


def _printable(value, limit: int) -> str | None:
    """A name someone else chose (a process's), cut and escaped."""
    if value is None:
        return None
    return escaped(str(value)[:limit]) or None


class _Stream:
    """One streaming exchange: a few hundred bytes."""

    __slots__ = ("side", "api", "model", "model_from_stream", "events", "chunks", "tokens",
                 "base_ns", "first_ns", "last_chunk_ns", "last_ns", "start_ns", "gaps", "stalls",
                 "status", "end", "http_status", "lost", "labels", "midway", "operation", "http",
                 "grpc_method")

    def __init__(self, side: str, api: str | None, model: str | None, base_ns: int | None,
                 start_ns: int, operation: str | None = None) -> None:
        self.side = side
        self.api = api or "sse"
        self.operation = operation  # gen_ai.operation.name, from the request's path
        self.model = model
        self.model_from_stream = False
        self.events = 0
        self.chunks = 0
        self.tokens: int | None = None
        self.base_ns = base_ns          # the request's last byte (TTFT's start), if seen
        self.first_ns: int | None = None
        self.last_chunk_ns = 0
        self.last_ns = start_ns
        self.start_ns = start_ns
        self.gaps = Gaps()
        self.stalls = 0
        self.status = "open"
        self.end: str | None = None
        self.http_status: int | None = None
        self.lost = 0
        self.labels: tuple | None = None  # metric labels, cached until api or model change
        # joined mid-way (no response head seen): a stream only once a
        # well-formed event comes; a binary protocol's bytes never make one
        self.midway = False
        self.http = "1.1"
        self.grpc_method: str | None = None  # a gRPC call's path, cut and escaped

    def __repr__(self) -> str:
        return f"<stream {self.side} {self.api} {self.status} chunks={self.chunks}>"


class _Request:
    __slots__ = ("api", "operation", "model", "streaming", "end_ns", "stream")

    def __init__(self, route: http1.Route, streaming: bool) -> None:
        self.api, self.operation = route
        self.model: str | None = None
        self.streaming = streaming
        self.end_ns: int | None = None
        self.stream: _Stream | None = None  # a streaming request's stream, before its response


class _Exchange:
    """One HTTP/2 stream id: its request, and its stream once it is one."""

    __slots__ = ("api", "operation", "model", "streaming", "end_ns", "stream", "grpc_method",
                 "answered", "request_done", "response_done")

    def __init__(self, route: http1.Route, streaming: bool, grpc_method: str | None = None) -> None:
        self.api, self.operation = route
        self.model: str | None = None
        self.streaming = streaming
        self.end_ns: int | None = None
        self.stream: _Stream | None = None
        self.grpc_method = grpc_method
        self.answered = False       # the response's head came
        self.request_done = False   # END_STREAM each way: then the stream id is forgotten
        self.response_done = False


class _H2:
    """An HTTP/2 connection's parsers and the stream ids under way."""

    __slots__ = ("client", "requests", "responses", "exchanges", "unreadable")

    def __init__(self, client: bool, preface_done: int = http2.PREFACE_LINE) -> None:
        self.client = client  # this process wrote the preface
        self.requests = http2.Http2Direction(True, preface_done=preface_done)
        self.responses = http2.Http2Direction(False)
        self.exchanges: dict[int, _Exchange] = {}
        self.unreadable = False

    def __repr__(self) -> str:
        return f"<h2 client={self.client} streams={len(self.exchanges)}>"


_NO_ROUTE = http1.Route(None, None)
_GRPC_ROUTE = http1.Route("grpc", None)


class _Conn:
    __slots__ = ("key", "keys", "pid", "uid", "socket", "comm", "tls", "local", "remote", "wrote",
                 "read", "reqs", "stream", "closed", "identity", "h2")

    def __init__(self, key) -> None:
        self.key = key  # the first; `keys` holds every process's key for it
        self.keys = {key}
        self.pid = _pid_of(key)
        self.uid: int | None = None
        self.socket: int | None = None  # the socket's inode number, the same in every process
        self.comm: str | None = None
        self.tls: bool | None = None
        self.local: str | None = None
        self.remote: str | None = None
        self.identity = identity.UNKNOWN  # its process's service, executable, container, pod
        self.wrote = http1.HttpDirection()
        self.read = http1.HttpDirection()
        self.reqs: list[_Request] = []  # a few at most; a deque would cost 600 bytes
        self.stream: _Stream | None = None  # the stream whose response is under way
        self.h2: _H2 | None = None  # from the HTTP/2 preface on: its streams, by id

    def __repr__(self) -> str:
        return f"<conn pid={self.pid} requests={len(self.reqs)}>"


def _pid_of(key) -> int:
    return key[0] if isinstance(key, tuple) and key else key


def _open_of(c: _Conn) -> list[_Stream]:
    """A connection's open streams: the response's under way, then those of
    streaming requests not yet answered (HTTP/2: every stream id's)."""
    if c.h2 is not None:
        return [x.stream for x in c.h2.exchanges.values()
                if x.stream is not None and x.stream.status == "open"]
    out = [r.stream for r in c.reqs if r.stream is not None]
    if c.stream is not None and c.stream.status == "open":
        out.insert(0, c.stream)
    return out


class StreamTracker:
    """See /work/notes/streams-interface.md and docs/spec.md §11."""

    def __init__(self, stall_ms: float = 1000, max_streams: int = 10000, metrics=None) -> None:
        if max_streams < 1:
            raise ValueError("max_streams must be at least 1")
        self.stall_ns = int(stall_ms * 1e6)
        self.max_streams = max_streams
        self.metrics = metrics
        self._conns: OrderedDict = OrderedDict()  # every key of every connection
        self._by_pid: dict[int, set] = {}
        self._by_socket: dict[tuple, _Conn] = {}  # (tls, socket inode): its connection
        # Connections whose descriptor was closed while another still holds
        # the socket, and no other key of it is known yet (a descriptor passed
        # over a UNIX socket): the next process to use the socket adopts it.
        self._orphans: OrderedDict = OrderedDict()
        self._evicted: OrderedDict = OrderedDict()  # key: its socket (or None), until closed
        self._evicted_by_pid: dict[int, set] = {}
        # The kernel side's hook: told of each connection key evicted here.
        self.on_evicted = None
        self._finished: deque[dict] = deque()
        self._out: list = []
        self._open = 0  # streams under way (kept as a count: counters may be read from another thread)
        self._c = {k: 0 for k in (
            "streams_done", "streams_cancelled", "streams_error", "streams_incomplete",
            "evicted", "evicted_client", "evicted_server", "reports_dropped",
            "http2_connections", "http2_unreadable", "http2_lost", "http2_hpack",
            "http2_framing", "http2_oversized", "http2_midway", "grpc_compressed",
            "compressed", "upgraded", "skipped_bytes", "lost_bytes", "resyncs",
            "malformed_events", "oversized_events", "comments", "unconfirmed")}
        self._events = self._chunks = 0  # (attributes: counted at every event)

    def __repr__(self) -> str:
        return f"<StreamTracker connections={len(self._conns)}>"

    # --- the kernel side's calls --------------------------------------------------------

    def describe(self, conn, *, pid: int | None = None, comm: str | None = None,
                 tls: bool | None = None, local: str | None = None,
                 remote: str | None = None, uid: int | None = None,
                 socket: int | None = None, who: identity.Identity | None = None) -> None:
        if conn in self._evicted:
            kept = self._evicted[conn]
            if socket is None or kept is None or kept == socket:
                return  # the evicted connection, seen again by the kernel: still ignored
            self._unevict(conn)  # its descriptor now holds another socket
        c = self._conns.get(conn)
        if c is None and socket is not None:
            c = self._adopt(conn, (bool(tls), socket))
        if c is None:
            c = self._conn(conn)
        if uid is not None:
            c.uid = uid
        if socket is not None and c.socket is None:
            c.socket = socket
            self._by_socket[(bool(tls), socket)] = c
        if comm is not None:
            c.comm = _printable(comm, _COMM_MAX)
        if pid is not None:
            c.pid = pid  # the process that uses it now (the index is by key)
        if tls is not None:
            c.tls = bool(tls)
        if local is not None:
            c.local = _printable(local, 64)
        if remote is not None:
            c.remote = _printable(remote, 64)
        if who is not None:
            c.identity = who
        if c.stream is not None:
            c.stream.labels = None  # they name tls, the identity and the server
        if c.h2 is not None:
            for s in _open_of(c):
                s.labels = None

    def data(self, conn, outgoing: bool, payload: bytes, t_ns: int, lost: int = 0) -> None:
        c = self._conns.get(conn)
        if c is None:
            if conn in self._evicted:
                return
            c = self._conn(conn)
        else:
            self._conns.move_to_end(conn)
            if c.h2 is not None:
                self._h2_data(c, outgoing, payload, t_ns, lost)
                return
        d = c.wrote if outgoing else c.read
        if lost:
            self._c["lost_bytes"] += lost
            s = c.stream
            if s is not None and d.role == "response":
                s.lost += lost
        if type(payload) is not bytes:
            payload = bytes(payload)
        out = self._out
        resyncs, skipped = d.resyncs, d.skipped
        d.feed(payload, lost, out)
        if d.resyncs != resyncs:
            self._c["resyncs"] += d.resyncs - resyncs
        if d.skipped != skipped:
            self._c["skipped_bytes"] += d.skipped - skipped
            if d.role is None and not lost and http2.looks_like_frames(payload):
                self._h2_frames_first(c, outgoing, payload, t_ns, d.skipped == len(payload))
                return
        if not out:
            return
        for kind, a, b, x in out:
            if kind == http1.EVENT:
                self._event(c, c.stream, a, t_ns)
            else:
                self._message(c, outgoing, kind, a, b, x, t_ns)
        out.clear()

    def closed(self, conn, t_ns: int, shared: bool = False) -> None:
        """CONN's descriptor was closed; SHARED: other descriptors (another
        process's, a dup) still hold its socket, so it goes on there."""
        if conn in self._evicted:
            self._unevict(conn)
            return
        c = self._conns.get(conn)
        if c is None:
            return
        self._release(c, conn)
        if c.keys:
            return  # another process's key of it goes on
        if shared and c.socket is not None:
            self._orphan(c)
            return
        self._drop(c)
        self._end_conn(c, t_ns, "close")

    def process_exited(self, pid: int, t_ns: int) -> None:
        for key in list(self._evicted_by_pid.get(pid, ())):
            self._unevict(key)
        for key in list(self._by_pid.get(pid, ())):
            c = self._conns.get(key)
            if c is None:
                continue
            self._release(c, key)
            if not c.keys:
                self._drop(c)
                self._end_conn(c, t_ns, "exit")
        self._by_pid.pop(pid, None)

    def forked(self, parent: int, child: int) -> list:
        """Process CHILD was forked from PARENT: every connection of the
        parent is the child's too (the same sockets). Returns the child's
        new keys (its evicted ones are evicted too, and told so)."""
        added = []
        for key in list(self._by_pid.get(parent, ())):
            c = self._conns.get(key)
            if c is None:
                continue
            ckey = (child, *key[1:])
            if ckey not in self._conns:
                self._hold(c, ckey)
                added.append(ckey)
        for key in list(self._evicted_by_pid.get(parent, ())):
            ckey = (child, *key[1:])
            self._mark_evicted(ckey, self._evicted[key])
            if self.on_evicted is not None:
                self.on_evicted(ckey)
        return added

    def pop_finished(self) -> list[dict]:
        out = list(self._finished)
        self._finished.clear()
        return out

    def open_streams(self, t_ns: int | None = None) -> list[dict]:
        out: list[dict] = []
        for c in self._conns.values():
            out.extend(self._report(c, s, t_ns if t_ns is not None else s.last_ns)
                       for s in _open_of(c) if not s.midway)
        return out

    @property
    def counters(self) -> dict:
        out = dict(self._c)
        out["events"], out["chunks"] = self._events, self._chunks
        out["connections"] = len(self._conns)
        out["streams_open"] = self._open
        return out

    # --- inside --------------------------------------------------------------------------

    def _conn(self, key) -> _Conn:
        c = self._conns.get(key)
        if c is not None:
            return c
        while len(self._conns) >= self.max_streams:
            self._evict(self._conns[next(iter(self._conns))])
        c = _Conn(key)
        self._conns[key] = c
        self._by_pid.setdefault(c.pid, set()).add(key)
        return c

    def _evict(self, old: _Conn) -> None:
        """OLD goes, to keep the tracker bounded: its open streams are
        counted by side, not reported, and each of its keys is ignored
        until its descriptor closes."""
        self._drop(old)
        for s in _open_of(old):
            if s.midway:
                continue  # never a stream
            self._c["evicted"] += 1
            self._c["evicted_" + s.side] += 1
            self._open -= 1
            if self.metrics is not None:
                self.metrics.evicted(s.side, 1)
        for key in list(old.keys):
            self._release(old, key)
            self._mark_evicted(key, old.socket)
            if self.on_evicted is not None:
                self.on_evicted(key)

    def _mark_evicted(self, key, socket: int | None) -> None:
        self._evicted[key] = socket
        self._evicted.move_to_end(key)
        self._evicted_by_pid.setdefault(_pid_of(key), set()).add(key)
        while len(self._evicted) > _EVICTED_PER_STREAM * self.max_streams:
            self._unevict(next(iter(self._evicted)))

    def _unevict(self, key) -> None:
        self._evicted.pop(key, None)
        keys = self._evicted_by_pid.get(_pid_of(key))
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._evicted_by_pid[_pid_of(key)]

    def _hold(self, c: _Conn, key) -> None:
        """KEY (another process's, or another descriptor's) names C too."""
        c.keys.add(key)
        self._conns[key] = c
        self._by_pid.setdefault(_pid_of(key), set()).add(key)

    def _release(self, c: _Conn, key) -> None:
        """KEY no longer names C (closed, its process gone, evicted)."""
        c.keys.discard(key)
        self._conns.pop(key, None)
        keys = self._by_pid.get(_pid_of(key))
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_pid[_pid_of(key)]
        if c.pid == _pid_of(key) and c.keys:
            c.pid = _pid_of(next(iter(c.keys)))  # the process that goes on with it

    def _drop(self, c: _Conn) -> None:
        """C leaves the socket index and the orphans (it ends, or is evicted)."""
        if c.socket is not None and self._by_socket.get((bool(c.tls), c.socket)) is c:
            del self._by_socket[(bool(c.tls), c.socket)]
        self._orphans.pop(id(c), None)

    def _orphan(self, c: _Conn) -> None:
        self._orphans[id(c)] = c
        while len(self._orphans) > self.max_streams:
            _, old = self._orphans.popitem(last=False)
            self._evict(old)

    def _adopt(self, key, socket: tuple) -> _Conn | None:
        """The connection of SOCKET, now used through KEY as well (a
        descriptor passed on, a fork the kernel could not report)."""
        c = self._by_socket.get(socket)
        if c is None:
            return None
        self._orphans.pop(id(c), None)
        self._hold(c, key)
        if not c.keys - {key}:
            c.pid = _pid_of(key)
        return c

    def _event(self, c: _Conn, s: _Stream | None, ev: tuple, t: int) -> None:
        cls, api, model, tokens, flags = ev
        if cls == api_events.COMMENT:
            self._c["comments"] += 1
            return
        if s is None or s.status != "open":
            return  # after the API's end, or an event-stream nobody asked for a stream of
        self._events += 1
        s.events += 1
        s.last_ns = t
        if s.midway and not flags & api_events.MALFORMED:
            s.midway = False  # a stream now: counted open from here
            self._open += 1
        if flags:
            if flags & api_events.MALFORMED:
                self._c["malformed_events"] += 1
            if flags & api_events.OVERSIZED:
                self._c["oversized_events"] += 1
        if api is not None and s.api != api:
            s.api = api
            s.labels = None
        if model is not None and not s.model_from_stream:
            s.model = model
            s.model_from_stream = True
            s.labels = None
        if tokens is not None:
            s.tokens = tokens
        if cls == api_events.CHUNK or (cls == api_events.GENERIC and s.api == "sse"):
            self._chunks += 1
            s.chunks += 1
            m = self.metrics
            if s.first_ns is None:
                s.first_ns = t
                if m is not None and s.base_ns is not None:
                    m.first_chunk(s.labels or self._labels(c, s), (t - s.base_ns) / 1e9)
                elif m is not None:
                    m.chunk(s.labels or self._labels(c, s))
            else:
                gap = t - s.last_chunk_ns
                s.gaps.add(gap // 1000)
                if gap > self.stall_ns:
                    s.stalls += 1
                if m is not None:
                    m.gap(s.labels or self._labels(c, s), gap / 1e9, gap > self.stall_ns)
            s.last_chunk_ns = t
        elif cls == api_events.END:
            self._finish(c, s, t, "done", "api")
        elif cls == api_events.ERROR:
            self._finish(c, s, t, "error", "error")

    def _labels(self, c: _Conn, s: _Stream) -> tuple:
        if s.labels is None:
            server = c.remote if s.side == "client" else c.local
            s.labels = (s.side, s.api, "true" if c.tls else "false", s.model or "", c.uid,
                        s.operation, c.identity, server)
        return s.labels

    def _message(self, c: _Conn, outgoing: bool, kind: int, a, b, x, t: int) -> None:
        if kind == http1.REQUEST_HEAD:
            methods = (c.read if outgoing else c.wrote).methods
            if len(methods) < _MAX_PENDING:
                methods.append(a)
            if len(c.reqs) >= _MAX_PENDING:
                old = c.reqs.pop(0)
                if old.stream is not None:
                    self._c["evicted"] += 1
                    self._open -= 1
            c.reqs.append(_Request(b, bool(x)))
        elif kind == http1.REQUEST_END:
            if not c.reqs:
                return
            r = c.reqs[-1]
            r.model, r.end_ns = a, t
            r.streaming = r.streaming or b
            if r.streaming and r.stream is None:
                side = "client" if outgoing else "server"
                r.stream = _Stream(side, r.api, r.model, t, t, r.operation)
                self._open += 1
        elif kind == http1.RESPONSE_HEAD:
            self._response(c, outgoing, a, b, x, t)
        elif kind == http1.RESPONSE_END:
            s = c.stream
            if s is not None:
                c.stream = None
                if s.status == "open":
                    self._finish(c, s, t, "done", "body")
        elif kind == http1.MIDSTREAM:
            self._response(c, outgoing, None, True, False, t)
        elif kind == http1.HTTP2:
            self._c["http2_connections"] += 1
            for s in _open_of(c):  # HTTP/1.x before it (an h2c upgrade, not followed): over
                self._finish(c, s, t, "cancelled", "body")
            c.stream = None
            c.reqs.clear()
            c.h2 = _H2(client=outgoing)
            (c.read if outgoing else c.wrote).ignore()
            if a:
                self._h2_data(c, outgoing, a, t, 0)
        elif kind == http1.UPGRADE:
            self._c["upgraded"] += 1

    def _response(self, c: _Conn, outgoing: bool, status: int | None, is_sse: bool,
                  compressed: bool, t: int) -> None:
        """A response's head (STATUS None: an event stream joined mid-way)."""
        r = c.reqs.pop(0) if c.reqs else None
        s = r.stream if r is not None else None
        streaming = r is not None and r.streaming
        if c.stream is not None and c.stream.status == "open":
            self._finish(c, c.stream, t, "cancelled", "body")  # a new response: the old one is over
        c.stream = None
        if compressed and (is_sse or streaming):
            self._c["compressed"] += 1
            is_sse = streaming = False  # seen, not parsed
        failed = status is not None and status >= 300
        if not is_sse and not (streaming and failed):
            if s is not None:
                self._open -= 1  # the request asked for a stream; the answer is not one
            return
        if s is None:
            side = "server" if outgoing else "client"
            s = _Stream(side, r.api if r else None, r.model if r else None,
                        r.end_ns if r else None, t, r.operation if r else None)
            s.midway = status is None and r is None
            if not s.midway:
                self._open += 1
        s.http_status = status
        s.last_ns = t
        c.stream = s
        if failed:
            self._finish(c, s, t, "error", "error")

    def _end_conn(self, c: _Conn, t: int, how: str) -> None:
        for s in _open_of(c):
            # An event stream of no known API ends when its connection does (a body
            # delimited by the close); an API's stream ends with its own last event.
            body_by_close = (s is c.stream and s.api == "sse" and how == "close"
                             and (c.wrote if s.side == "server" else c.read).until_close)
            self._finish(c, s, t, "done" if body_by_close else "cancelled", how)
        c.stream = None
        c.reqs.clear()
        if c.h2 is not None:
            c.h2.exchanges.clear()

    def _finish(self, c: _Conn, s: _Stream, t: int, status: str, end: str) -> None:
        if s.midway:  # joined mid-way, and no well-formed event: not a stream
            s.status, s.end = status, end
            self._c["unconfirmed"] += 1
            return
        if s.lost:
            status = "incomplete"  # whatever it looked like, bytes of it never reached us
        s.status, s.end = status, end
        self._open -= 1
        if t > s.last_ns:
            s.last_ns = t
        self._c["streams_" + status] += 1
        report = self._report(c, s, s.last_ns)
        if len(self._finished) >= self.max_streams:
            self._finished.popleft()
            self._c["reports_dropped"] += 1
        self._finished.append(report)
        if self.metrics is not None:
            base = s.base_ns if s.base_ns is not None else s.start_ns
            self.metrics.finished(self._labels(c, s), status, s.tokens, (s.last_ns - base) / 1e9)

    def _report(self, c: _Conn, s: _Stream, t: int) -> dict:
        base = s.base_ns
        ttft = None
        if s.first_ns is not None and base is not None:
            ttft = round((s.first_ns - base) / 1e6, 3)
        return {
            "pid": c.pid, "comm": c.comm, "side": s.side, "tls": c.tls,
            "local": c.local, "remote": c.remote, "api": s.api, "model": s.model,
            "events": s.events, "chunks": s.chunks, "tokens": s.tokens,
            "time_to_first_chunk_ms": ttft, "chunk_gap_ms": s.gaps.summary_ms(),
            "stalls": s.stalls,
            "duration_ms": round((t - (base if base is not None else s.start_ns)) / 1e6, 3),
            "status": s.status, "http_status": s.http_status, "end": s.end,
            "lost_bytes": s.lost, "started_ns": base if base is not None else s.start_ns,
            "operation": s.operation, "http": s.http, "grpc_method": s.grpc_method,
            **c.identity.fields(),
        }

    # --- HTTP/2 (pyxdp.streams.http2): a stream per stream id ----------------------------

    def _h2_data(self, c: _Conn, outgoing: bool, payload: bytes, t: int, lost: int) -> None:
        h = c.h2
        assert h is not None
        d = h.requests if outgoing == h.client else h.responses
        if lost:
            self._c["lost_bytes"] += lost
            if d is h.responses:
                for s in _open_of(c):
                    s.lost += lost
        if type(payload) is not bytes:
            payload = bytes(payload)
        out: list = []
        skipped = d.skipped
        d.feed(payload, lost, out)
        if d.skipped != skipped:
            self._c["skipped_bytes"] += d.skipped - skipped
        for kind, sid, a, b in out:
            if kind == http2.EVENT or kind == http2.MESSAGE:
                x = h.exchanges.get(sid)
                if x is not None and x.stream is not None:
                    if kind == http2.EVENT:
                        self._event(c, x.stream, a, t)
                    else:
                        if a:
                            self._c["grpc_compressed"] += 1  # counted; no message is parsed anyway
                        self._event(c, x.stream, _GRPC_CHUNK, t)
            elif kind == http2.HEADERS:
                if d.requests:
                    self._h2_request(h, sid, a)
                else:
                    self._h2_response(c, h, sid, a, t)
            elif kind == http2.END:
                self._h2_end(c, h, d, sid, a, b, t)
            elif kind == http2.RESET:
                x = h.exchanges.pop(sid, None)
                (h.requests if d is h.responses else h.responses).forget(sid)
                if x is not None and x.stream is not None and x.stream.status == "open":
                    self._finish(c, x.stream, t, "cancelled", "reset")
            elif kind == http2.GOAWAY:
                if d is h.responses:  # (a client's GOAWAY names pushed streams: none followed)
                    for sid in [k for k in h.exchanges if k > a]:
                        x = h.exchanges.pop(sid)
                        if x.stream is not None and x.stream.status == "open":
                            self._finish(c, x.stream, t, "cancelled", "goaway")
            elif kind == http2.UNREADABLE:
                self._h2_unreadable(c, h, d, a, t)
                if a == "midway":
                    return  # evicted

    def _h2_frames_first(self, c: _Conn, outgoing: bool, payload: bytes, t: int,
                         first: bool) -> None:
        """HTTP/2 frames where a connection's bytes began: a server's own
        preface (a SETTINGS frame, written before it reads the client's) on
        a connection that carried nothing else, followed; otherwise HTTP/2
        joined mid-way, whose HPACK context began before us: counted and
        evicted (the kernel then ignores it), never guessed."""
        if first and c.read.role is None and c.wrote.role is None and payload[3:5] == b"\x04\x00":
            c.h2 = _H2(client=not outgoing, preface_done=0)
            c.wrote.ignore()
            c.read.ignore()
            self._h2_data(c, outgoing, payload, t, 0)
            return
        self._h2_midway(c)

    def _h2_midway(self, c: _Conn) -> None:
        self._c["http2_unreadable"] += 1
        self._c["http2_midway"] += 1
        self._evict(c)
        if c.h2 is not None:
            c.h2.exchanges.clear()

    def _h2_side(self, h: _H2) -> str:
        return "client" if h.client else "server"

    def _h2_exchange(self, h: _H2, sid: int, x: _Exchange) -> None:
        if len(h.exchanges) >= _H2_EXCHANGES:
            old = h.exchanges.pop(next(iter(h.exchanges)))
            if old.stream is not None and old.stream.status == "open":
                self._c["evicted"] += 1
                self._c["evicted_" + old.stream.side] += 1
                self._open -= 1
        h.exchanges[sid] = x

    def _h2_request(self, h: _H2, sid: int, head: http2.Head) -> None:
        if sid in h.exchanges or head.method is None:
            return  # a request's trailers
        path = head.path or b""
        if head.grpc:
            name = _printable(path.decode("ascii", "replace"), _GRPC_METHOD_MAX)
            self._h2_exchange(h, sid, _Exchange(_GRPC_ROUTE, True, name))
        else:
            streaming = b"text/event-stream" in head.accept
            self._h2_exchange(h, sid, _Exchange(http1.route(path), streaming))

    def _h2_stream(self, h: _H2, x: _Exchange, api: str | None, base: int | None,
                   t: int) -> _Stream:
        s = _Stream(self._h2_side(h), api, x.model, base, t, x.operation)
        s.http = "2"
        s.grpc_method = x.grpc_method
        self._open += 1
        x.stream = s
        return s

    def _h2_response(self, c: _Conn, h: _H2, sid: int, head: http2.Head, t: int) -> None:
        x = h.exchanges.get(sid)
        if head.status is None:  # trailers: gRPC's status
            if x is not None and x.stream is not None and x.stream.status == "open" \
                    and head.grpc_status is not None:
                self._grpc_status(c, x.stream, head.grpc_status, t)
            return
        if head.status < 200:
            return  # interim
        if x is None:  # its request was never seen (that direction unreadable)
            x = _Exchange(_NO_ROUTE, False)
            x.request_done = True
            self._h2_exchange(h, sid, x)
        if x.answered:
            return
        x.answered = True
        is_sse, grpc, streaming = head.event_stream, head.grpc, x.streaming
        s = x.stream
        if head.compressed and (is_sse or streaming):
            self._c["compressed"] += 1
            is_sse = streaming = False  # seen, not parsed
        failed = head.status >= 300
        if not (is_sse or grpc) and not (streaming and failed):
            if s is not None:
                self._open -= 1  # the request asked for a stream; the answer is not one
                x.stream = None
            return
        if s is None:
            s = self._h2_stream(h, x, "grpc" if grpc else x.api, x.end_ns, t)
        s.http_status = head.status
        s.last_ns = t
        if failed:
            self._finish(c, s, t, "error", "error")
        elif grpc and head.grpc_status is not None:  # a trailers-only response
            self._grpc_status(c, s, head.grpc_status, t)

    def _grpc_status(self, c: _Conn, s: _Stream, status: int, t: int) -> None:
        if status == 0:
            self._finish(c, s, t, "done", "api")
        else:
            self._finish(c, s, t, "error", "error")

    def _h2_end(self, c: _Conn, h: _H2, d: http2.Http2Direction, sid: int, model, stream: bool,
                t: int) -> None:
        x = h.exchanges.get(sid)
        if x is None:
            return
        if d.requests:
            x.request_done = True
            x.model, x.end_ns = model, t
            x.streaming = x.streaming or stream
            if x.streaming and x.stream is None and not x.answered:
                self._h2_stream(h, x, x.api, t, t)
        else:
            x.response_done = True
            s = x.stream
            if s is not None and s.status == "open":
                self._finish(c, s, t, "done", "body")
        if x.request_done and x.response_done:
            del h.exchanges[sid]

    def _h2_unreadable(self, c: _Conn, h: _H2, d: http2.Http2Direction, reason: str,
                       t: int) -> None:
        """D can no longer be read: the streams whose bytes it carries end incomplete."""
        if reason == "midway":  # (no preface where the client's bytes began)
            self._h2_midway(c)
            return
        self._c["http2_" + reason] += 1
        if not h.unreadable:
            h.unreadable = True
            self._c["http2_unreadable"] += 1
        other = h.requests if d is h.responses else h.responses
        for sid, x in list(h.exchanges.items()):
            if d is h.responses or not x.request_done:
                del h.exchanges[sid]
                other.forget(sid)
                if x.stream is not None and x.stream.status == "open":
                    self._finish(c, x.stream, t, "incomplete", "unreadable")
