# SPDX-License-Identifier: Apache-2.0
"""`bound = "at-least"` or `"at-most"`: a knob that never moves a value already past the profile's.

A throughput profile asks for room (16 MiB buffers); a host that already
allows more must keep it, as tuned's ">" does. Values with several fields
("min default max", as tcp_rmem) are bounded field by field, so a host's
larger maximum stays while a smaller default is raised.
"""

from typing import Any

from pyxdp.tuning.kind import FieldError

BOUNDS = ("at-least", "at-most")


def _numbers(value: str) -> list[int] | None:
    try:
        return [int(field) for field in value.split()]
    except ValueError:
        return None


def check(fields: dict[str, Any]) -> None:
    """A bound needs a value of integers to compare against (profile load time)."""
    if "bound" in fields and not _numbers(fields["value"]):
        raise FieldError(f"`bound` needs a value of integers, not {fields['value']!r}")


def past(current: int, asked: int, bound: str) -> bool:
    return current > asked if bound == "at-least" else current < asked


def held(current: str, asked: str, bound: str) -> tuple[str, list[int]]:
    """The value to hold, and the (1-based) fields of CURRENT kept because they
    are past ASKED already. A CURRENT that is not as many integers as ASKED
    cannot be compared: then ASKED is held, as without a bound."""
    have, want = _numbers(current), _numbers(asked)
    if have is None or want is None or len(have) != len(want):
        return asked, []
    kept = [n for n, (c, a) in enumerate(zip(have, want), 1) if past(c, a, bound)]
    value = [c if n in kept else a for n, (c, a) in enumerate(zip(have, want), 1)]
    return " ".join(map(str, value)), kept


def satisfied(current: str, asked: str, bound: str) -> bool:
    """CURRENT meets the bound: every field is ASKED's or past it."""
    value, _ = held(current, asked, bound)
    return value.split() == current.split()


def kept_reason(current: str, asked: str, bound: str, kept: list[int]) -> str:
    """Why the fields KEPT of CURRENT were not moved to ASKED."""
    have = current.split()
    which = have[0] if len(have) == 1 else \
        " and ".join(f"field {n} ({have[n - 1]})" for n in kept)
    side = "higher" if bound == "at-least" else "lower"
    return f"asked {bound.replace('-', ' ')} {asked}: {which} is {side} already, so it stays"
