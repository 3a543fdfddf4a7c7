# SPDX-License-Identifier: Apache-2.0
"""The line each key of a TOML document is written on.

tomllib returns values without positions, so the configuration's errors
could not name a line. This reads a document tomllib has already accepted
and records, for each key, the line it is on, by its path in the parsed
data: ("interface", 0, "ports") for `ports` in the first `[[interface]]`,
("interface", 0) for that table's header. Strings (all four kinds),
comments, multi-line arrays, inline tables, quoted and dotted keys are
stepped over as TOML defines them; the document being valid, nothing here
has to report an error.
"""

import bisect
import re

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_SPACE = " \t\r"
_SCALAR_END = re.compile(r"[,\]}\n#]")


class _Reader:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.newlines = [i for i, c in enumerate(text) if c == "\n"]
        self.lines: dict[tuple, int] = {}
        self.arrays: dict[tuple, int] = {}  # array-of-tables path -> tables so far

    def line(self) -> int:
        return bisect.bisect_left(self.newlines, self.pos) + 1

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos:self.pos + n]

    def skip(self, newlines: bool) -> None:
        """Spaces, and comments; newlines too when NEWLINES."""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in _SPACE or (newlines and c == "\n"):
                self.pos += 1
            elif c == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                return

    def string(self) -> str:
        """A string of any kind at pos; its text, escapes left as written
        (only keys' text is used, and a key with an escape is rare enough
        to be named as written)."""
        for quote in ('"""', "'''"):
            if self.peek(3) == quote:
                end = self._closing(quote, self.pos + 3)
                while self.text[end + 3:end + 4] == quote[0]:  # up to two quotes end the content
                    end += 1
                value = self.text[self.pos + 3:end]
                self.pos = end + 3
                return value
        quote = self.peek()
        end = self._closing(quote, self.pos + 1)
        value = self.text[self.pos + 1:end]
        self.pos = end + 1
        return value

    def _closing(self, quote: str, start: int) -> int:
        i = start
        while True:
            i = self.text.index(quote, i)
            if quote[0] == '"' and _escaped(self.text, i):
                i += 1
                continue
            return i

    def key(self) -> tuple[str, ...]:
        parts = []
        while True:
            self.skip(newlines=False)
            if self.peek() in ('"', "'"):
                parts.append(self.string())
            else:
                m = _BARE.match(self.text, self.pos)
                assert m, f"a key at offset {self.pos}"
                parts.append(m.group())
                self.pos = m.end()
            self.skip(newlines=False)
            if self.peek() != ".":
                return tuple(parts)
            self.pos += 1

    def resolve(self, raw: tuple[str, ...]) -> tuple:
        """A header's dotted key as a path in the data: each array of
        tables it passes through stands for its last table."""
        path: tuple = ()
        for part in raw:
            path += (part,)
            if path in self.arrays:
                path += (self.arrays[path] - 1,)
        return path

    def record(self, path: tuple) -> None:
        self.lines.setdefault(path, self.line())

    def value(self, path: tuple) -> None:
        c = self.peek()
        if c in ('"', "'"):
            self.string()
        elif c == "[":
            self.pos += 1
            index = 0
            while True:
                self.skip(newlines=True)
                if self.peek() == "]":
                    self.pos += 1
                    return
                self.record(path + (index,))
                self.value(path + (index,))
                index += 1
                self.skip(newlines=True)
                if self.peek() == ",":
                    self.pos += 1
        elif c == "{":
            self.pos += 1
            while True:
                self.skip(newlines=True)
                if self.peek() == "}":
                    self.pos += 1
                    return
                self.pair(path)
                self.skip(newlines=True)
                if self.peek() == ",":
                    self.pos += 1
        else:
            m = _SCALAR_END.search(self.text, self.pos)
            self.pos = len(self.text) if m is None else m.start()

    def pair(self, table: tuple) -> None:
        line = self.line()
        keys = self.key()
        for i in range(1, len(keys) + 1):
            self.lines.setdefault(table + keys[:i], line)
        self.skip(newlines=False)
        assert self.peek() == "=", f"'=' at offset {self.pos}"
        self.pos += 1
        self.skip(newlines=False)
        self.value(table + keys)

    def document(self) -> dict[tuple, int]:
        table: tuple = ()
        while True:
            self.skip(newlines=True)
            if self.pos >= len(self.text):
                return self.lines
            if self.peek() == "[":
                array = self.peek(2) == "[["
                self.pos += 2 if array else 1
                raw = self.key()
                self.pos += 2 if array else 1
                if array:
                    parent = self.resolve(raw[:-1]) + raw[-1:]
                    self.arrays[parent] = self.arrays.get(parent, 0) + 1
                table = self.resolve(raw)
                for n in range(1, len(table) + 1):  # the tables it implies too
                    self.record(table[:n])
            else:
                self.pair(table)


def _escaped(text: str, i: int) -> bool:
    """Whether the character at I follows an odd run of backslashes."""
    n = 0
    while i - n - 1 >= 0 and text[i - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def key_lines(text: str) -> dict[tuple, int]:
    """Path -> line (from 1) of every key and table header in TEXT, a
    document tomllib accepts."""
    return _Reader(text).document()
