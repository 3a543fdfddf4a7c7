# SPDX-License-Identifier: Apache-2.0
"""Token streams over HTTP/1.1 (docs/spec.md §11.2): an incremental parser
of one direction of a connection (requests or responses, several in turn
on a keep-alive connection), handing an event-stream response's body to
pyxdp.streams.sse_events and a request's body to a model finder. Pure:
bytes in, small tuples out, no I/O.

Privacy: the parser sees prompts and completions. Nothing it returns, no
exception it lets out and no repr carries content: only kinds, counts,
statuses, HTTP header facts and model names (bounded, printable).

Memory: at most BOUND bytes buffered per direction.
"""

import re
from typing import NamedTuple

from pyxdp.streams import sse_events
from pyxdp.streams.api_events import ANTHROPIC, MODEL_FIELD, OPENAI, model_name
from pyxdp.streams.sse_events import BOUND, SseEvents


class Route(NamedTuple):
    """What a request's path says: the API it hints at and OpenTelemetry's
    gen_ai.operation.name for it (None: a path of no known API)."""

    api: str | None
    operation: str | None


_NO_ROUTE = Route(None, None)
_CHAT = {ANTHROPIC: Route(ANTHROPIC, "chat"), OPENAI: Route(OPENAI, "chat")}
_TEXT_COMPLETION = Route(OPENAI, "text_completion")


def route(path: bytes) -> Route:
    """The Route of a request PATH: Anthropic's /v1/messages and OpenAI's
    /chat/completions and /responses are chat, OpenAI's bare /completions
    text_completion."""
    if b"/messages" in path:
        return _CHAT[ANTHROPIC]
    if b"/chat/completions" in path or b"/responses" in path:
        return _CHAT[OPENAI]
    if b"/completions" in path:
        return _TEXT_COMPLETION
    return _NO_ROUTE

# What feed() appends to its out list: (kind, a, b, c).
REQUEST_HEAD = 1   # a: method (str), b: the path's Route, c: streaming (Accept)
REQUEST_END = 2    # a: model named by the body (str|None), b: streaming (bool: "stream": true or Accept)
RESPONSE_HEAD = 3  # a: status (int), b: event stream (bool), c: compressed (bool)
EVENT = sse_events.EVENT  # 4, a: the classified event (api_events.classify)
RESPONSE_END = 5   # the body ended as its framing says (chunk terminator, Content-Length)
HTTP2 = 6          # the HTTP/2 preface's first line; a: the bytes after it (the rest of the read)
UPGRADE = 7        # 101 Switching Protocols or a CONNECT tunnel: ignored from here on
MIDSTREAM = 8      # an event stream already under way (the observer began after its head)

_METHODS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"PATCH ", b"HEAD ", b"OPTIONS ")
_H2_PREFACE = b"PRI * HTTP/2.0"
# The request body asks for a stream.
_REQ_STREAM = re.compile(rb'"stream"\s*:\s*true')
# An event stream joined mid-way: a field at a read's start, maybe after a chunk-size line.
_MIDSTREAM = re.compile(rb"(?:([0-9A-Fa-f]{1,8})\r\n)?(?:data:|event:|id:|: )")
_CHUNK_SIZE = re.compile(rb"(?:^|\r\n)([0-9A-Fa-f]{1,8})(?:;[^\r\n]{0,200})?\r\n")


class RequestBody:
    """Finds the requested model and `"stream": true` in a request body of
    any size, keeping only a short tail between feeds."""

    __slots__ = ("model", "stream", "_tail")

    def __init__(self) -> None:
        self.model: str | None = None
        self.stream = False
        self._tail = b""

    def feed(self, b: bytes, out: list) -> None:
        if self.model is not None and self.stream:
            return
        text = self._tail + b
        if self.model is None:
            found = MODEL_FIELD.search(text)
            if found:
                self.model = model_name(found.group(1).decode("ascii", "replace"))
        if not self.stream and _REQ_STREAM.search(text):
            self.stream = True
        self._tail = text[-160:]

    def lost(self) -> None:
        self._tail = b""


class _Skip:
    """A body nobody reads: counted, dropped."""

    __slots__ = ()

    def feed(self, b: bytes, out: list) -> None:
        pass

    def lost(self) -> None:
        pass


_SKIP = _Skip()
_NO_HEAD: dict = {}  # never written: a fresh dict is made at each start line

# Direction states.
_START, _SYNC, _HEAD, _CL, _SIZE, _DATA, _CRLF, _TRAILER, _CLOSE, _RESYNC, _IGNORE = range(11)


class HttpDirection:
    """One direction of one connection: requests (a client writes them, a
    server reads them) or responses. feed(bytes, lost, out) appends what it
    found to out (see the kinds at the top)."""

    __slots__ = ("state", "role", "methods", "lost_bytes", "resyncs", "skipped", "_line", "_drop",
                 "_remaining", "_sink", "_head", "_is_request")

    def __init__(self) -> None:
        self.state = _START
        self.role: str | None = None  # "request" or "response", once a message was seen
        # Methods of the requests the other direction carried, oldest first:
        # a response to HEAD has no body.
        self.methods: list[str] = []  # (a list: a deque costs 600 bytes even empty)
        self.lost_bytes = 0
        self.resyncs = 0
        self.skipped = 0       # bytes ignored: not HTTP/1.x, or after an upgrade
        self._line = b""
        self._drop = False
        self._remaining = 0
        self._sink: SseEvents | RequestBody | _Skip = _SKIP
        self._head: dict = _NO_HEAD
        self._is_request = False

    def __repr__(self) -> str:
        return (f"<HttpDirection state={self.state} role={self.role} lost={self.lost_bytes} "
                f"buffered={len(self._line)}>")

    def ignore(self) -> None:
        """Nothing more of this direction is HTTP/1.x (HTTP/2 took it over)."""
        self.state = _IGNORE
        self._sink = _SKIP
        self._line = b""

    @property
    def until_close(self) -> bool:
        """In a response body that the connection's close ends."""
        return self.state == _CLOSE

    # --- input -------------------------------------------------------------------------

    def feed(self, b: bytes, lost: int, out: list) -> None:
        if lost:
            self._lost(lost, out)
        elif self.state == _SIZE and not self._line:
            # The usual read of a chunked event stream: one whole chunk.
            i = b.find(b"\r\n", 0, 20)
            if i > 0 and b[-2:] == b"\r\n":
                try:
                    n = int(b[:i], 16)
                except ValueError:
                    n = 0
                if n > 0 and len(b) == i + n + 4:
                    self._sink.feed(b[i + 2:-2], out)
                    return
        while b:
            st = self.state
            if st == _DATA:
                n = self._remaining
                if len(b) <= n:
                    self._sink.feed(b, out)
                    self._remaining = n - len(b)
                    if self._remaining == 0:
                        self.state = _CRLF
                    return
                self._sink.feed(b[:n], out)
                self._remaining = 0
                self.state = _CRLF
                b = b[n:]
            elif st == _SIZE and not self._line and b"\r\n" in b[:20]:
                i = b.find(b"\r\n")  # the usual size line, whole in this read
                self._size_line(b[:i], out)
                b = b[i + 2:]
            elif st == _CRLF and b[:2] == b"\r\n":
                self.state = _SIZE
                b = b[2:]
            elif st == _SIZE or st == _CRLF or st == _TRAILER or st == _HEAD or st == _START:
                b = self._lines(b, out)
            elif st == _CL:
                n = self._remaining
                if len(b) < n:
                    self._sink.feed(b, out)
                    self._remaining = n - len(b)
                    return
                self._sink.feed(b[:n], out)
                b = b[n:]
                self._end(out)
            elif st == _CLOSE:
                self._sink.feed(b, out)
                return
            elif st == _SYNC:
                b = self._sync(b, out)
            elif st == _RESYNC:
                b = self._resync(b)
            else:  # _IGNORE
                self.skipped += len(b)
                return

    def _lost(self, n: int, out: list) -> None:
        self.lost_bytes += n
        self.resyncs += 1
        st = self.state
        if st == _DATA and n <= self._remaining:
            self._remaining -= n
            self._sink.lost()
            if self._remaining == 0:
                self.state = _CRLF
        elif st == _CL and n <= self._remaining:
            self._remaining -= n
            self._sink.lost()
            if self._remaining == 0:
                self._end(out)
        elif st == _CLOSE:
            self._sink.lost()
        elif st in (_DATA, _CRLF, _SIZE, _TRAILER):
            self._sink.lost()
            self._line = b""
            self.state = _RESYNC
        elif st != _IGNORE:
            # A head, or a Content-Length body overrun: the next message is found at a read's start.
            self._sink = _SKIP
            self._line = b""
            self.state = _SYNC

    def _desync(self) -> None:
        """The chunked framing does not add up: find it again."""
        self.resyncs += 1
        self._sink.lost()
        self._line = b""
        self.state = _RESYNC

    def _sync(self, b: bytes, out: list) -> bytes:
        """Outside any known message: a message starts only at a read's start,
        and so does an event stream joined mid-way (the response's head
        unseen: its framing is known only if a chunk-size line comes first)."""
        if b.startswith(b"HTTP/1.") or b.startswith(_METHODS) or b.startswith(_H2_PREFACE):
            self.state = _START
            return b
        found = _MIDSTREAM.match(b) if self.role != "request" else None
        if found is not None:
            self.role = "response"
            self._is_request = False
            self._sink = SseEvents()
            out.append((MIDSTREAM, None, None, None))
            if found.group(1):
                self._remaining = int(found.group(1), 16)
                self.state = _DATA if self._remaining else _TRAILER
                return b[found.end(1) + 2:]
            self.state = _CLOSE
            return b
        self.skipped += len(b)
        return b""

    def _resync(self, b: bytes) -> bytes:
        """Chunked framing lost: a chunk-size line at a read's start, or one
        between CRLFs inside it."""
        found = _CHUNK_SIZE.search(b)
        if found is None:
            self.skipped += len(b)
            return b""
        size = int(found.group(1), 16)
        self.skipped += found.start()
        if size == 0:
            self.state = _TRAILER
        else:
            self._remaining = size
            self.state = _DATA
        return b[found.end():]

    # --- lines: the start line, headers, chunk sizes, trailers ------------------------

    def _lines(self, b: bytes, out: list) -> bytes:
        while b:
            if self.state == _START and not self._line and not self._plausible(b):
                if b[:1] not in (b"\r", b"\n"):  # (blank lines between messages are allowed)
                    self.state = _SYNC
                    return b
            i = b.find(b"\n")
            if i < 0:
                if self._drop:
                    return b""
                self._line += b
                if len(self._line) > BOUND:  # an absurd line: keep its head only
                    self._line = self._line[:BOUND]
                    self._drop = True
                return b""
            if self._drop:
                line = self._line
                self._drop = False
            else:
                line = self._line + b[:i] if self._line else b[:i]
                if len(line) > BOUND:
                    line = line[:BOUND]
            self._line = b""
            b = b[i + 1:]
            if line[-1:] == b"\r":
                line = line[:-1]
            st = self.state
            if st == _SIZE:
                self._size_line(line, out)
            elif st == _HEAD:
                if line:
                    self._header(line)
                else:
                    self._head_done(out)
            elif st == _START:
                if line.startswith(_H2_PREFACE):
                    # HTTP/2 (pyxdp.streams.http2) from here: the rest of this read goes with it
                    self.state = _IGNORE
                    out.append((HTTP2, b, None, None))
                    return b""
                if line:
                    self._start_line(line, out)
                    if self.state == _SYNC:
                        self.skipped += len(line)
                    if self.state == _IGNORE or self.state == _SYNC:
                        return b
            elif st == _CRLF:  # the end of a chunk's data
                if line:
                    self._desync()
                else:
                    self.state = _SIZE
            elif not line:  # _TRAILER
                self._end(out)
            if self.state not in (_SIZE, _CRLF, _HEAD, _START, _TRAILER):
                return b
        return b

    @staticmethod
    def _plausible(b: bytes) -> bool:
        """Could these first bytes begin an HTTP/1.x message? (Quick: binary
        garbage and TLS records fail at the first byte.)"""
        head = b[:8]
        return (b"HTTP/1."[:len(head)] == head[:7] or _H2_PREFACE[:len(head)] == head
                or any(m[:len(head)] == head[:len(m)] for m in _METHODS))

    def _start_line(self, line: bytes, out: list) -> None:
        parts = line.split(b" ", 2)
        self._head = {}
        if parts[0].startswith(b"HTTP/1.") and len(parts) >= 2 and parts[1].isdigit():
            self._is_request = False
            self.role = "response"
            self._head["status"] = int(parts[1][:3])
        elif len(parts) == 3 and parts[2].startswith(b"HTTP/1.") and parts[0].isalpha():
            self._is_request = True
            self.role = "request"
            self._head["method"] = parts[0][:16].decode("ascii", "replace")
            self._head["api"] = route(parts[1])
        else:
            self.state = _SYNC
            return
        self.state = _HEAD

    def _header(self, line: bytes) -> None:
        name, colon, value = line.partition(b":")
        name = name.strip().lower()
        if name in (b"content-type", b"transfer-encoding", b"content-length", b"content-encoding",
                    b"accept"):
            self._head[name] = value.strip().lower()[:200]

    def _head_done(self, out: list) -> None:
        h = self._head
        self._head = _NO_HEAD  # (a head's dict costs 350 bytes; a connection keeps none)
        chunked = b"chunked" in h.get(b"transfer-encoding", b"")
        length = h.get(b"content-length")
        if self._is_request:
            method = h["method"]
            streaming = b"text/event-stream" in h.get(b"accept", b"")
            out.append((REQUEST_HEAD, method, h["api"], streaming))
            self._sink = RequestBody()
            if streaming:
                self._sink.stream = True
            if chunked:
                self.state = _SIZE
            elif length and length.isdigit() and int(length) > 0:
                self._remaining = int(length)
                self.state = _CL
            else:
                self._end(out)
            return
        status = h["status"]
        method = self.methods.pop(0) if self.methods else "GET"
        if 100 <= status < 200:
            if status == 101:
                self.state = _IGNORE
                out.append((UPGRADE, None, None, None))
            else:
                self.state = _START  # interim: the real response follows
                self.methods.insert(0, method)
            return
        if method == "CONNECT" and 200 <= status < 300:
            self.state = _IGNORE
            out.append((UPGRADE, None, None, None))
            return
        sse = h.get(b"content-type", b"").startswith(b"text/event-stream")
        coding = h.get(b"content-encoding", b"identity")
        compressed = coding not in (b"identity", b"")
        out.append((RESPONSE_HEAD, status, sse, compressed))
        self._sink = SseEvents() if sse and not compressed else _SKIP
        if method == "HEAD" or status in (204, 304):
            self._end(out)
        elif chunked:
            self.state = _SIZE
        elif length is not None:
            n = int(length) if length.isdigit() else 0
            if n:
                self._remaining = n
                self.state = _CL
            else:
                self._end(out)
        else:
            self.state = _CLOSE

    def _size_line(self, line: bytes, out: list) -> None:
        size = line.split(b";", 1)[0].strip()
        try:
            n = int(size, 16)
        except ValueError:
            self._desync()
            return
        if n == 0:
            self.state = _TRAILER
        else:
            self._remaining = n
            self.state = _DATA

    def _end(self, out: list) -> None:
        sink = self._sink
        if self._is_request:
            model = sink.model if isinstance(sink, RequestBody) else None
            stream = sink.stream if isinstance(sink, RequestBody) else False
            out.append((REQUEST_END, model, stream, None))
        else:
            out.append((RESPONSE_END, None, None, None))
        self._sink = _SKIP
        self.state = _START
