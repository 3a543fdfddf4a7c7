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
