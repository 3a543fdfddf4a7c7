# SPDX-License-Identifier: Apache-2.0
"""A TOML file's bytes as data, or one line `FILE:LINE: what` whatever is
wrong with them: not UTF-8, not TOML, or nested deeper than tomllib's
recursion goes (a few hundred levels; no file of zerolayer's needs five)."""

import re
import tomllib

from pyxdp.trusted_file import BadFile

_LONG_NUMBER = re.compile(r"[0-9_]{4000,}")
_TOML_AT = re.compile(r"^(.*) \(at (?:line (\d+), column (\d+)|end of document)\)$")


def loads(raw: bytes, label: str, error: type[BadFile] = BadFile) -> dict:
    """RAW, the bytes of the file called LABEL, parsed; ERROR if it cannot be."""
    return parse(decode(raw, label, error), label, error)


def decode(raw: bytes, label: str, error: type[BadFile] = BadFile) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise error(f"{label}:{line}: not UTF-8 (byte {exc.start})") from None


def parse(text: str, label: str, error: type[BadFile] = BadFile) -> dict:
    """TEXT, the file called LABEL, parsed; ERROR if it cannot be."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(_located(str(exc), label, text)) from None
    except RecursionError:
        raise error(f"{label}:{_deepest_line(text)}: arrays or tables nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4,300 digits, which int() refuses
        m = _LONG_NUMBER.search(text)
        line = text.count("\n", 0, m.start()) + 1 if m else 1
        raise error(f"{label}:{line}: {str(exc).partition(':')[0]}") from None


def _located(message: str, label: str, text: str) -> str:
    m = _TOML_AT.match(message)
    if not m:
        return f"{label}:1: {message}"
    line = m.group(2) or str(text.count("\n") + 1)
    column = f" (column {m.group(3)})" if m.group(3) else ""
    return f"{label}:{line}: {m.group(1)}{column}"


def _deepest_line(text: str) -> int:
    """The line where brackets and braces nest deepest, outside strings and
    comments: where a document too deep for tomllib goes too deep. The
    document is not valid TOML, so this only has to be close."""
    depth = deepest = 0
    line = where = 1
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\n":
            line += 1
            if len(quote) == 1:  # a one-line string ends at the line's end, closed or not
                quote = ""
        elif quote:
            if c == "\\" and quote[0] == '"':
                i += 1
                line += text[i:i + 1] == "\n"
            elif text.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif c == "#":
            end = text.find("\n", i)
            i = (len(text) if end < 0 else end) - 1
        elif c in "\"'":
            quote = c * 3 if text.startswith(c * 3, i) else c
            i += len(quote) - 1
        elif c in "[{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, line
        elif c in "]}":
            depth -= 1
        i += 1
    return where
