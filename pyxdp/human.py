# SPDX-License-Identifier: Apache-2.0
"""Numbers and tables as people read them, shared by the CLI, the bench's
sections and `zerolayer top`."""


def number(n: float) -> str:
    """Thousands separated; one decimal only when there is a fraction."""
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"


def table(headers: list[str], rows: list[list]) -> str:
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), *(line(r) for r in cells)])


def escaped(text: str) -> str:
    """TEXT as it may reach a terminal, a log or JSON when someone else
    chose it (a mapped path, a process's name, a model name): every
    character that is not printable (C0 and C1 controls, DEL, bidi and other
    format characters) becomes its \\x, \\u or \\U escape, and a backslash
    is doubled, so what is shown is unambiguous and moves no cursor."""
    if text.isprintable() and "\\" not in text:  # the usual name, without a loop in Python
        return text
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)
