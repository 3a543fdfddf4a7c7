# SPDX-License-Identifier: Apache-2.0
"""Token streams over HTTP/2 (docs/spec.md §11.2.6): an incremental frame
parser of one direction of a connection, HPACK through the python-hyper
project's `hpack`, each stream id's few header facts, and its body handed
to a sink per stream id: pyxdp.streams.sse_events for an event stream,
GrpcMessages for gRPC, a model finder for a request. Pure: bytes in, small
tuples out, no I/O.

Privacy: the parser sees prompts, completions and every header (tokens
too). Nothing it returns, no exception it lets out and no repr carries
content: only kinds, stream ids, statuses, a path (for the caller to cut
and escape) and counts. Header values live only in HPACK's dynamic table,
bounded by the peers' own setting (at most MAX_TABLE bytes here).

Memory: a frame header, at most MAX_HEADER_BLOCK bytes of one header
block, and the first 8 bytes of a control frame buffered per direction;
DATA is never buffered (its bytes pass on as they come).
"""

from hpack import Decoder
from hpack.exceptions import HPACKError

from pyxdp.streams.http1 import RequestBody
from pyxdp.streams.sse_events import SseEvents

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
PREFACE_LINE = len(b"PRI * HTTP/2.0\r\n")  # what pyxdp.streams.http1 consumed of it

MAX_HEADER_BLOCK = 65536  # one header block (HEADERS and its CONTINUATIONs), bytes
MAX_TABLE = 65536         # an HPACK dynamic table larger than this is refused
MAX_STREAMS = 256         # stream ids followed at once per direction (servers allow 100-128)

# What feed() appends to its out list: (kind, stream id, a, b).
HEADERS = 11    # a: Head, b: END_STREAM
EVENT = 12      # a: the classified SSE event (api_events.classify)
MESSAGE = 13    # a gRPC message ended; a: its compressed flag
END = 14        # END_STREAM in this direction; a: the request body's model, b: its "stream": true
RESET = 15      # RST_STREAM: the stream is over in both directions
GOAWAY = 16     # stream id 0; a: the last stream id the sender processed
UNREADABLE = 17  # stream id 0; a: why (a REASONS name): nothing more of this direction is read

REASONS = ("lost", "hpack", "framing", "oversized", "midway")

# Frame types and flags (RFC 9113 §6).
_DATA, _HEADERS, _PRIORITY, _RST, _SETTINGS, _PUSH, _PING, _GOAWAY, _WINDOW, _CONT = range(10)
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY_FLAG = 0x1, 0x4, 0x8, 0x20

_PREFACE_TAIL, _HEAD, _PAD, _BODY, _SKIP, _BLOCK, _CONTROL, _DEAD = range(8)


class Head:
    """The facts of one header block that a stream needs; every other
    header is dropped as it is decoded."""

    __slots__ = ("method", "path", "status", "content_type", "encoding", "accept", "grpc_status")

    def __init__(self) -> None:
        self.method: str | None = None
        self.path: bytes | None = None  # a user's choice: cut and escaped by whoever prints it
        self.status: int | None = None
        self.content_type = b""
        self.encoding = b""
        self.accept = b""
        self.grpc_status: int | None = None

    def __repr__(self) -> str:
        return f"<Head status={self.status} method={self.method}>"

    @property
    def event_stream(self) -> bool:
        return self.content_type.startswith(b"text/event-stream")

    @property
    def grpc(self) -> bool:
        return self.content_type.startswith(b"application/grpc")

    @property
    def compressed(self) -> bool:
        return self.encoding not in (b"", b"identity")


def _head_of(headers) -> Head:
    h = Head()
    for name, value in headers:
        if name == b":status":
            h.status = int(value[:3]) if value[:3].isdigit() else 0
        elif name == b":method":
            h.method = value[:16].decode("ascii", "replace")
        elif name == b":path":
            h.path = value[:512]
        elif name == b"content-type":
            h.content_type = value[:200].lower()
        elif name == b"content-encoding":
            h.encoding = value[:64].strip().lower()
        elif name == b"accept":
            h.accept = value[:200].lower()
        elif name == b"grpc-status":
            h.grpc_status = int(value[:4]) if value[:4].isdigit() else -1
    return h


class GrpcMessages:
    """gRPC's length-prefixed messages in one body (a compressed flag, a
    4-byte big-endian length, the message): one MESSAGE at each message's
    last byte. Only the prefix is kept, never a message's bytes."""

    __slots__ = ("_prefix", "_left", "_flag")

    def __init__(self) -> None:
        self._prefix = b""
        self._left = -1  # bytes of the message under way; -1: reading a prefix
        self._flag = 0

    def __repr__(self) -> str:
        return f"<GrpcMessages left={self._left}>"

    def feed(self, b: bytes, out: list) -> None:
        i, n = 0, len(b)
        while i < n:
            if self._left < 0:
                take = min(5 - len(self._prefix), n - i)
                self._prefix += b[i:i + take]
                i += take
                if len(self._prefix) < 5:
                    return
                self._flag = self._prefix[0] & 1
                self._left = int.from_bytes(self._prefix[1:5], "big")
                self._prefix = b""
            take = min(self._left, n - i)
            i += take
            self._left -= take
            if self._left == 0:
                out.append((MESSAGE, self._flag))
                self._left = -1

    def lost(self) -> None:
        pass


class _Skip:
    """A body nobody reads."""

    __slots__ = ()

    def feed(self, b: bytes, out: list) -> None:
        pass


_NO_SINK = _Skip()


class Http2Direction:
    """One direction of one HTTP/2 connection. REQUESTS: the direction a
    client writes (it begins with the preface, of which PREFACE_DONE bytes
    were consumed already); otherwise the server's, which begins with its
    SETTINGS. feed(bytes, lost, out) appends what it found (the kinds
    above)."""

    __slots__ = ("requests", "state", "unreadable", "skipped", "streams_over", "_buf", "_need",
                 "_left", "_pad", "_type", "_flags", "_sid", "_block", "_block_sid",
                 "_block_flags", "_block_type", "_hpack", "_sinks", "_tmp")

    def __init__(self, requests: bool, preface_done: int | None = None) -> None:
        self.requests = requests
        self.unreadable: str | None = None  # the REASONS name, once nothing more can be read
        self.skipped = 0       # bytes not parsed (after the direction became unreadable)
        self.streams_over = 0  # streams past MAX_STREAMS, not followed
        self._buf = b""        # a partial frame header, the preface's tail, a control frame's start
        self._need = 0
        self._left = 0         # the frame's bytes still to come (its data, its padding)
        self._pad = 0
        self._type = self._flags = self._sid = 0
        self._block = b""      # a header block being gathered (HEADERS, CONTINUATION)
        self._block_sid = 0    # its stream (0: none under way)
        self._block_flags = 0
        self._block_type = 0
        self._hpack = Decoder()
        self._hpack.max_allowed_table_size = MAX_TABLE
        self._hpack.max_header_list_size = MAX_HEADER_BLOCK
        self._sinks: dict[int, SseEvents | GrpcMessages | RequestBody | _Skip] = {}
        self._tmp: list = []
        if preface_done is not None:
            self.state = _PREFACE_TAIL
            self._need = len(PREFACE) - preface_done
        else:
            self.state = _HEAD
            self._need = 9

    def __repr__(self) -> str:
        return (f"<Http2Direction requests={self.requests} state={self.state} "
                f"streams={len(self._sinks)} unreadable={self.unreadable}>")

    def forget(self, sid: int) -> None:
        """Stream SID is over (reset by the other direction): its body is not read."""
        self._sinks.pop(sid, None)

    def give_up(self, reason: str, out: list) -> None:
        """Nothing more of this direction can be read (HPACK's context is gone)."""
        if self.state == _DEAD:
            return
        self.state = _DEAD
        self.unreadable = reason
        self._buf = self._block = b""
        self._sinks.clear()
        self._hpack = None  # type: ignore[assignment]  # (its table holds header values)
        out.append((UNREADABLE, 0, reason, None))

    # --- input -------------------------------------------------------------------------

    def feed(self, b: bytes, lost: int, out: list) -> None:
        if lost:
            self.give_up("lost", out)
        n = len(b)
        i = 0
        while i < n:
            st = self.state
            if st == _BODY:
                take = self._left if self._left < n - i else n - i
                sink = self._sinks.get(self._sid, _NO_SINK)
                if sink is not _NO_SINK:
                    self._sink_feed(sink, b[i:i + take] if take < n or i else b, out)
                i += take
                self._left -= take
                if self._left == 0:
                    if self._pad:
                        self._left, self._pad = self._pad, 0
                        self.state = _SKIP
                    else:
                        self._frame_done(out)
            elif st == _HEAD:
                if not self._buf and n - i >= 9:
                    self._frame_head(b[i:i + 9], out)
                    i += 9
                else:
                    take = min(9 - len(self._buf), n - i)
                    self._buf += b[i:i + take]
                    i += take
                    if len(self._buf) == 9:
                        head, self._buf = self._buf, b""
                        self._frame_head(head, out)
            elif st == _SKIP:
                take = min(self._left, n - i)
                i += take
                self._left -= take
                if self._left == 0:
                    self._frame_done(out)
            elif st == _BLOCK or st == _CONTROL:
                take = min(self._left, n - i)
                if st == _BLOCK:
                    self._block += b[i:i + take]
                elif len(self._buf) < self._need:
                    self._buf += b[i:i + min(take, self._need - len(self._buf))]
                i += take
                self._left -= take
                if self._left == 0:
                    if st == _BLOCK:
                        self._block_frame(out)
                    else:
                        self._control(out)
            elif st == _PAD:
                self._buf = b[i:i + 1]
                i += 1
                self._left -= 1
                self._data_padded(out)
            elif st == _PREFACE_TAIL:
                take = min(self._need, n - i)
                want = PREFACE[len(PREFACE) - self._need:][:take]
                if b[i:i + take] != want:
                    # (not even its first line seen: the connection began before us)
                    self.give_up("midway" if self._need == len(PREFACE) else "framing", out)
                    continue
                i += take
                self._need -= take
                if self._need == 0:
                    self.state = _HEAD
            else:  # _DEAD
                self.skipped += n - i
                return

    def _sink_feed(self, sink, data: bytes, out: list) -> None:
        if type(sink) is RequestBody:
            sink.feed(data, out)
            return
        tmp = self._tmp
        sink.feed(data, tmp)
        if tmp:
            sid = self._sid
            if type(sink) is GrpcMessages:
                out.extend((MESSAGE, sid, flag, None) for _, flag in tmp)
            else:
                out.extend((EVENT, sid, ev, None) for _, ev, _, _ in tmp)
            tmp.clear()

    # --- frames ------------------------------------------------------------------------

    def _frame_head(self, h: bytes, out: list) -> None:
        length = (h[0] << 16) | (h[1] << 8) | h[2]
        ftype, flags = h[3], h[4]
        sid = ((h[5] & 0x7F) << 24) | (h[6] << 16) | (h[7] << 8) | h[8]
        self._type, self._flags, self._sid, self._left, self._pad = ftype, flags, sid, length, 0
        if self._block_sid and ftype != _CONT:
            self.give_up("framing", out)  # a header block is only continued, never interleaved
            return
        if ftype == _DATA:
            if flags & _PADDED:
                if not length:
                    self.give_up("framing", out)
                    return
                self._buf, self._need = b"", 1
                self.state = _PAD
            elif length:
                self.state = _BODY
            else:
                self._frame_done(out)
        elif ftype == _HEADERS or ftype == _CONT or ftype == _PUSH:
            if ftype == _CONT and sid != self._block_sid:
                self.give_up("framing", out)
                return
            if len(self._block) + length > MAX_HEADER_BLOCK:
                self.give_up("oversized", out)
                return
            if ftype != _CONT:
                self._block_flags = flags
            self.state = _BLOCK
            if not length:
                self._block_frame(out)
        elif ftype == _RST or ftype == _GOAWAY:
            self._buf, self._need = b"", (4 if ftype == _RST else 8)
            self.state = _CONTROL
            if not length:
                self._control(out)
        else:  # SETTINGS, PING, PRIORITY, WINDOW_UPDATE, extensions: nothing a stream needs
            self.state = _SKIP
            if not length:
                self._frame_done(out)

    def _data_padded(self, out: list) -> None:
        """A padded DATA frame's pad length has come."""
        pad = self._buf[0]
        self._buf = b""
        if pad > self._left:
            self.give_up("framing", out)
            return
        self._left -= pad
        self._pad = pad
        if self._left:
            self.state = _BODY
        elif pad:
            self._left, self._pad = pad, 0
            self.state = _SKIP
        else:
            self._frame_done(out)

    def _control(self, out: list) -> None:
        ftype, buf = self._type, self._buf
        self._buf = b""
        if len(buf) == self._need:
            if ftype == _RST and self._sid:
                self._sinks.pop(self._sid, None)
                out.append((RESET, self._sid, None, None))
            elif ftype == _GOAWAY:
                out.append((GOAWAY, 0, int.from_bytes(buf[:4], "big") & 0x7FFFFFFF, None))
        self.state = _HEAD

    def _block_frame(self, out: list) -> None:
        """The end of a HEADERS, PUSH_PROMISE or CONTINUATION frame."""
        ftype, flags = self._type, self._flags
        if ftype != _CONT:
            # The first frame of a block: its padding, priority or promised id off.
            block = self._block
            start, end = 0, len(block)
            if flags & _PADDED:
                if not block:
                    self.give_up("framing", out)
                    return
                start, end = 1, end - block[0]
            if ftype == _PUSH:
                start += 4
            elif flags & _PRIORITY_FLAG:
                start += 5
            if start > end:
                self.give_up("framing", out)
                return
            self._block = block[start:end]
            self._block_sid = self._sid
            self._block_type = ftype
            self._block_flags = flags
        self.state = _HEAD
        if not flags & _END_HEADERS:
            return  # CONTINUATION frames follow
        block, self._block = self._block, b""
        sid, first = self._block_sid, self._block_flags
        self._block_sid = 0
        try:
            headers = self._hpack.decode(block, raw=True)
        except (HPACKError, ValueError, IndexError, TypeError, UnicodeError):
            self.give_up("hpack", out)  # entries never seen, or not HPACK at all
            return
        if self._block_type == _PUSH:
            return  # a pushed request: decoded for HPACK's sake, not followed
        head = _head_of(headers)
        end_stream = bool(first & _END_STREAM)
        self._open(sid, head)
        out.append((HEADERS, sid, head, end_stream))
        if end_stream:
            self._end(sid, out)

    def _open(self, sid: int, head: Head) -> None:
        """A header block on stream SID: the first one picks its body's sink."""
        if sid in self._sinks or head.method is None and head.status is None:
            return  # trailers, or a header block of a stream already followed
        if head.status is not None and head.status < 200:
            return  # interim: the real response's head follows
        if len(self._sinks) >= MAX_STREAMS:
            self.streams_over += 1
            return
        if self.requests:
            self._sinks[sid] = RequestBody()
        elif head.grpc:
            self._sinks[sid] = GrpcMessages()
        elif head.event_stream and not head.compressed:
            self._sinks[sid] = SseEvents()
        else:
            self._sinks[sid] = _NO_SINK

    def _end(self, sid: int, out: list) -> None:
        sink = self._sinks.pop(sid, None)
        if type(sink) is RequestBody:
            out.append((END, sid, sink.model, sink.stream))
        else:
            out.append((END, sid, None, False))

    def _frame_done(self, out: list) -> None:
        self.state = _HEAD
        if self._type == _DATA and self._flags & _END_STREAM:
            self._end(self._sid, out)


def looks_like_frames(b: bytes) -> bool:
    """Whether bytes at a read's start could be HTTP/2 frames joined
    mid-way (no preface seen): a frame header of a known type, its length
    within the default maximum, its reserved bit clear, its stream id
    fitting its type."""
    if len(b) < 9 or b[0] != 0 or b[1] > 0x40 or b[3] > _CONT or b[5] & 0x80:
        return False
    sid = int.from_bytes(b[5:9], "big")
    if b[3] in (_SETTINGS, _PING, _GOAWAY):
        return sid == 0
    return b[3] == _WINDOW or sid != 0
