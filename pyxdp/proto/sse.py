# SPDX-License-Identifier: Apache-2.0
"""Token streams over HTTP/1.1 (docs/spec.md §11): an incremental parser of
one direction of a connection (requests or responses, several in turn on a
keep-alive connection), the Server-Sent Events inside an event-stream
response (WHATWG rules), and the OpenAI / Anthropic classification of each
event. Pure: bytes in, small tuples out, no I/O.

Privacy: the parser sees prompts and completions. Nothing it returns, no
exception it lets out and no repr carries content: only kinds, counts,
statuses, HTTP header facts and model names (bounded, printable).

Memory: at most BOUND bytes buffered per direction (a partial line, the
data of one event); a longer line or event is capped: counted, classified
from its prefix, the rest skipped.
"""

import json
import re

BOUND = 4096  # bytes buffered per direction at most (a line, an event's data)

# What feed() appends to its out list: (kind, a, b, c).
REQUEST_HEAD = 1   # a: method (str), b: api hinted by the path ("openai"/"anthropic"/None), c: streaming (Accept)
REQUEST_END = 2    # a: model named by the body (str|None), b: streaming (bool: "stream": true or Accept)
RESPONSE_HEAD = 3  # a: status (int), b: event stream (bool), c: compressed (bool)
EVENT = 4          # a: the classified event (see classify)
RESPONSE_END = 5   # the body ended as its framing says (chunk terminator, Content-Length)
HTTP2 = 6          # the HTTP/2 preface: the direction is ignored from here on
UPGRADE = 7        # 101 Switching Protocols or a CONNECT tunnel: ignored from here on
MIDSTREAM = 8      # an event stream already under way (the observer began after its head)

# Event classes: the first element of a classified event.
OTHER = 0    # an event that carries no generated output (role, usage, ping, start/stop of a block)
CHUNK = 1    # an event carrying generated output
END = 2      # the API's end of the stream: OpenAI's [DONE], Anthropic's message_stop
ERROR = 3    # an error event, or an error object in place of a chunk
GENERIC = 4  # an event with data of no known API (a chunk of an "sse" stream)
COMMENT = 5  # a block of comment lines only: not an event

# Flags, the last element of a classified event.
MALFORMED = 1  # the data should have been JSON and was not
OVERSIZED = 2  # the event was longer than BOUND: classified from its prefix

OPENAI, ANTHROPIC = "openai", "anthropic"
_ANTHROPIC_EVENTS = frozenset((b"message_start", b"content_block_start", b"content_block_delta",
                               b"content_block_stop", b"message_delta", b"message_stop", b"ping"))
_METHODS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"PATCH ", b"HEAD ", b"OPTIONS ")
_H2_PREFACE = b"PRI * HTTP/2.0"
_COMMENT_EV = (COMMENT, None, None, None, 0)
_MODEL_MAX = 96
_TOKENS_MAX = 1 << 40
_last_model: tuple[str, str | None] = ("", None)  # a stream names one model in every chunk

_decode = json.JSONDecoder().raw_decode
# Prefix classification of an oversized event (the JSON cannot be decoded whole), and the
# request body's model.
_OVER_CHUNK = re.compile(rb'"(?:content|reasoning_content|text)"\s*:\s*"[^"]'
                         rb'|"tool_calls"\s*:\s*\[\s*\{')
_MODEL_FIELD = re.compile(rb'"model"\s*:\s*"([^"\\]{1,96})"')
# The request body asks for a stream.
_REQ_STREAM = re.compile(rb'"stream"\s*:\s*true')
# An event stream joined mid-way: a field at a read's start, maybe after a chunk-size line.
_MIDSTREAM = re.compile(rb"(?:([0-9A-Fa-f]{1,8})\r\n)?(?:data:|event:|id:|: )")
_CHUNK_SIZE = re.compile(rb"(?:^|\r\n)([0-9A-Fa-f]{1,8})(?:;[^\r\n]{0,200})?\r\n")


def model_name(value) -> str | None:
    """A model name fit to leave the process: printable ASCII, bounded."""
    if type(value) is not str:
        return None
    global _last_model
    if value == _last_model[0]:
        return _last_model[1]
    if len(value) <= _MODEL_MAX and value.isascii() and value.isprintable() and " " not in value:
        _last_model = (value, value or None)  # the usual case, without a loop in Python
        return value or None
    name = "".join(ch for ch in value[:_MODEL_MAX] if " " < ch < "\x7f")
    return name or None


def _tokens(value) -> int | None:
    if type(value) is int and 0 <= value < _TOKENS_MAX:
        return value
    return None


def classify(etype: bytes | None, data: bytes, flags: int = 0) -> tuple:
    """One SSE event as (class, api, model, tokens, flags). api is OPENAI,
    ANTHROPIC or None (not recognised); model and tokens are None unless the
    event names them."""
    if flags & OVERSIZED:
        return _classify_prefix(etype, data, flags)
    if etype is not None and etype != b"message":
        if etype in _ANTHROPIC_EVENTS:
            return _typed(ANTHROPIC, _anthropic_obj, etype, data, flags)
        if etype == b"error":
            return (ERROR, None, None, None, flags)
        if etype[:9] == b"response.":
            return _typed(OPENAI, _responses_obj, etype, data, flags)  # the Responses API
    if data[:6] == b"[DONE]" and data.strip() == b"[DONE]":
        return (END, OPENAI, None, None, flags)
    if not data:
        return (OTHER, None, None, None, flags)
    try:
        text = data.decode()
        if text[0] in " \t\n":
            text = text.lstrip()
        obj, end = _decode(text)
        if end != len(text) and text[end:].strip():
            raise ValueError("trailing bytes")
    except (ValueError, UnicodeDecodeError, IndexError):
        head = data.lstrip()[:1]
        return (OTHER if head in (b"{", b"[") else GENERIC, None, None, None,
                flags | MALFORMED if head in (b"{", b"[") else flags)
    if type(obj) is not dict:
        return (GENERIC, None, None, None, flags)
    choices = obj.get("choices")
    if type(choices) is list:
        return _openai(obj, choices, flags)
    if "error" in obj:
        return (ERROR, None, None, None, flags)
    kind = obj.get("type")
    if type(kind) is str:
        if kind.encode() in _ANTHROPIC_EVENTS:
            return _anthropic_obj(kind.encode(), obj, flags)
        if kind[:9] == "response.":
            return _responses_obj(kind.encode(), obj, flags)
    return (GENERIC, None, None, None, flags)


def _openai(obj: dict, choices: list, flags: int) -> tuple:
    cls = OTHER
    for choice in choices:
        if type(choice) is dict:
            delta = choice.get("delta")
            if type(delta) is dict:
                if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                    cls = CHUNK
                    break
            elif choice.get("text"):  # the legacy completions API
                cls = CHUNK
                break
    usage = obj.get("usage")
    tokens = _tokens(usage.get("completion_tokens")) if type(usage) is dict else None
    return (cls, OPENAI, model_name(obj.get("model")), tokens, flags)


def _typed(api: str, classify, etype: bytes, data: bytes, flags: int) -> tuple:
    """A typed event's data decoded, then CLASSIFY(etype, obj, flags); data
    that is not a JSON object is a malformed event of API."""
    try:
        obj, _ = _decode(data.decode().lstrip())
    except (ValueError, UnicodeDecodeError):
        return (OTHER, api, None, None, flags | MALFORMED)
    if type(obj) is not dict:
        return (OTHER, api, None, None, flags | MALFORMED)
    return classify(etype, obj, flags)


def _responses_obj(etype: bytes, obj: dict, flags: int) -> tuple:
    if etype[-6:] == b".delta":  # output_text, reasoning_text, function_call_arguments, refusal...
        return (CHUNK if obj.get("delta") else OTHER, OPENAI, None, None, flags)
    cls = (END if etype in (b"response.completed", b"response.incomplete") else
           ERROR if etype == b"response.failed" else OTHER)
    resp = obj.get("response")
    if type(resp) is not dict:
        return (cls, OPENAI, None, None, flags)
    usage = resp.get("usage")
    tokens = _tokens(usage.get("output_tokens")) if type(usage) is dict else None
    return (cls, OPENAI, model_name(resp.get("model")), tokens, flags)


def _anthropic_obj(etype: bytes, obj: dict, flags: int) -> tuple:
    if etype == b"content_block_delta":
        return (CHUNK, ANTHROPIC, None, None, flags)
    if etype == b"message_stop":
        return (END, ANTHROPIC, None, None, flags)
    if etype == b"message_start":
        msg = obj.get("message")
        return (OTHER, ANTHROPIC, model_name(msg.get("model")) if type(msg) is dict else None,
                None, flags)
    if etype == b"message_delta":
        usage = obj.get("usage")
        tokens = _tokens(usage.get("output_tokens")) if type(usage) is dict else None
        return (OTHER, ANTHROPIC, None, tokens, flags)
    return (OTHER, ANTHROPIC, None, None, flags)


def _classify_prefix(etype: bytes | None, data: bytes, flags: int) -> tuple:
    """An event too long to buffer whole, judged from its first BOUND bytes."""
    if etype in _ANTHROPIC_EVENTS:
        cls = CHUNK if etype == b"content_block_delta" else \
            END if etype == b"message_stop" else OTHER
        return (cls, ANTHROPIC, None, None, flags)
    if etype == b"error":
        return (ERROR, None, None, None, flags)
    if etype is not None and etype[:9] == b"response.":
        return (CHUNK if etype[-6:] == b".delta" else OTHER, OPENAI, None, None, flags)
    if b'"choices"' in data:
        found = _MODEL_FIELD.search(data)
        model = model_name(found.group(1).decode("ascii", "replace")) if found else None
        return (CHUNK if _OVER_CHUNK.search(data) else OTHER, OPENAI, model, None, flags)
    if b'"type":"content_block_delta"' in data or b'"type": "content_block_delta"' in data:
        return (CHUNK, ANTHROPIC, None, None, flags)
    return (GENERIC, None, None, None, flags)


class SseEvents:
    """The WHATWG event-stream parser over one response body: lines end with
    \\n, \\r\\n or \\r; `data:` lines join with \\n; an empty line dispatches.
    A block with a field (data, event, id, retry) is an event; a block of
    comments only is reported as COMMENT."""

    __slots__ = ("_line", "_data", "_dlen", "_etype", "_field", "_comment", "_skip_lf", "_drop",
                 "_over", "_skip", "_prev_nl", "_idle")

    def __init__(self) -> None:
        self._line = b""         # a partial line (at most BOUND bytes)
        self._data: list[bytes] = []
        self._dlen = 0
        self._etype: bytes | None = None
        self._field = False      # the block has a field other than data (event, id, retry)
        self._comment = False
        self._skip_lf = False    # the last feed ended on \r: a \n starting the next one is its pair
        self._drop = False       # dropping the rest of an over-long line
        self._over = False       # this event went past BOUND
        self._skip = False       # after lost bytes: skipping to the next event boundary
        self._prev_nl = False    # (while skipping) the last byte seen was a line end
        self._idle = True        # nothing pending: at an event boundary

    def __repr__(self) -> str:
        return f"<SseEvents buffered={len(self._line) + self._dlen}>"

    def lost(self) -> None:
        """Bytes went missing before the next feed: drop the event being
        built, and skip to the next event boundary."""
        self._line = b""
        self._reset_event()
        self._drop = False
        self._skip = True
        self._prev_nl = False
        self._idle = False

    def _reset_event(self) -> None:
        self._data = []
        self._dlen = 0
        self._etype = None
        self._field = self._comment = self._over = False

    def feed(self, b: bytes, out: list) -> None:
        if self._idle and b[-2:] == b"\n\n" and b"\r" not in b:
            # The usual read: whole events, nothing pending. One event of one data line,
            # or of an event line and a data line, is dispatched without the line loop.
            last = len(b) - 2
            if b[:6] == b"data: " and b.find(b"\n") == last and last < BOUND:
                out.append((EVENT, classify(None, b[6:last], 0), None, None))
                return
            if b[:7] == b"event: ":
                i = b.find(b"\n")
                if 7 < i < 71 and b[i + 1:i + 7] == b"data: " and b.find(b"\n", i + 1) == last \
                        and last < BOUND:
                    out.append((EVENT, classify(b[7:i], b[i + 7:last], 0), None, None))
                    return
        self._slow(b, out)
        self._idle = not (self._line or self._data or self._field or self._comment
                          or self._skip_lf or self._skip or self._drop)

    def _slow(self, b: bytes, out: list) -> None:
        if self._skip_lf:
            self._skip_lf = False
            if b[:1] == b"\n":
                b = b[1:]
        if self._skip:
            b = self._resync(b)
        if self._drop:
            b = self._drop_rest(b, out)
        if not b:
            return
        if self._line:
            b = self._line + b
            self._line = b""
        if b"\r" in b:
            if b[-1] == 13:
                self._skip_lf = True
            b = b.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = b.split(b"\n")
        tail = lines.pop()
        for line in lines:  # _line_ inlined: this loop runs for every line of every stream
            if line[:6] == b"data: ":
                self._add_data(line[6:])
            elif not line:
                self._dispatch(out)
            else:
                self._field_line(line)
        if tail:
            if len(tail) > BOUND:
                self._line = tail[:BOUND]
                self._drop = True
            else:
                self._line = tail

    def _resync(self, b: bytes) -> bytes:
        if b[:5] in (b"data:", b"event") or b[:1] == b":":
            self._skip = False  # the bytes after the loss begin a line
            return b
        n = len(b)
        i = 0
        while i < n:
            ch = b[i]
            if ch == 10 or ch == 13:
                end = i + 1 if ch == 13 and i + 1 < n and b[i + 1] == 10 else i  # \r\n is one
                if ch == 13 and end + 1 == n and end == i:
                    self._skip_lf = True  # its \n, if any, starts the next feed
                if self._prev_nl:  # an empty line: the next event starts after it
                    self._skip = False
                    return b[end + 1:]
                self._prev_nl = True
                i = end + 1
                continue
            self._prev_nl = False
            i += 1
        return b""

    def _drop_rest(self, b: bytes, out: list) -> bytes:
        ends = [i for i in (b.find(b"\n"), b.find(b"\r")) if i >= 0]
        if not ends:
            return b""
        i = min(ends)
        line, self._line, self._drop = self._line, b"", False
        self._over = True
        self._line_(line, out)
        if b[i] == 13:
            if i + 1 == len(b):
                self._skip_lf = True
            elif b[i + 1] == 10:
                i += 1
        return b[i + 1:]

    def _line_(self, line: bytes, out: list) -> None:
        if line[:6] == b"data: ":
            self._add_data(line[6:])
        elif not line:
            self._dispatch(out)
        else:
            self._field_line(line)

    def _field_line(self, line: bytes) -> None:
        if line[0] == 58:  # ":" a comment
            self._comment = True
            return
        name, colon, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._add_data(value)
        elif name == b"event":
            self._etype = value[:64]
            self._field = True
        elif name == b"id" or name == b"retry":
            self._field = True

    def _add_data(self, value: bytes) -> None:
        room = BOUND - self._dlen
        if len(value) >= room:
            if room <= 0:  # past the bound: nothing more kept, however many lines come
                self._over = True
                return
            value = value[:room]
            self._over = True
        self._data.append(value)
        self._dlen += len(value) + 1

    def _dispatch(self, out: list) -> None:
        data = self._data
        if data:
            ev = classify(self._etype, data[0] if len(data) == 1 else b"\n".join(data),
                          OVERSIZED if self._over else 0)
            out.append((EVENT, ev, None, None))
        elif self._field:
            ev = classify(self._etype, b"", 0)
            out.append((EVENT, ev, None, None))
        elif self._comment:
            out.append((EVENT, _COMMENT_EV, None, None))
        else:
            return
        self._reset_event()


class _RequestBody:
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
            found = _MODEL_FIELD.search(text)
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
        self._sink: SseEvents | _RequestBody | _Skip = _SKIP
        self._head: dict = _NO_HEAD
        self._is_request = False

    def __repr__(self) -> str:
        return (f"<HttpDirection state={self.state} role={self.role} lost={self.lost_bytes} "
                f"buffered={len(self._line)}>")

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
        if line.startswith(_H2_PREFACE):
            self.state = _IGNORE
            out.append((HTTP2, None, None, None))
            return
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
            path = parts[1]
            self._head["api"] = (ANTHROPIC if b"/messages" in path else
                                 OPENAI if b"/completions" in path or b"/responses" in path
                                 else None)
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
            self._sink = _RequestBody()
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
            model = sink.model if isinstance(sink, _RequestBody) else None
            stream = sink.stream if isinstance(sink, _RequestBody) else False
            out.append((REQUEST_END, model, stream, None))
        else:
            out.append((RESPONSE_END, None, None, None))
        self._sink = _SKIP
        self.state = _START
