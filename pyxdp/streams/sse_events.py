# SPDX-License-Identifier: Apache-2.0
"""The WHATWG event-stream parser over one response body (docs/spec.md
§11.2): lines, fields and events, each event classified by
pyxdp.streams.api_events. Pure: bytes in, small tuples out, no I/O; no
repr or exception carries content.

Memory: at most BOUND bytes buffered (a partial line, the data of one
event); a longer line or event is capped: counted, classified from its
prefix, the rest skipped.
"""

from pyxdp.streams.api_events import COMMENT, OVERSIZED, classify

BOUND = 4096  # bytes buffered per direction at most (a line, an event's data)
EVENT = 4  # what feed() appends: (EVENT, the classified event, None, None)
_COMMENT_EV = (COMMENT, None, None, None, 0)


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
