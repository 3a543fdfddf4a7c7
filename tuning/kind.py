# SPDX-License-Identifier: Apache-2.0
"""What a profile's `[[step.knob]]` can name: a kind, its fields, the plan lines it becomes.

Each kind is one class that owns everything about it: its name, the fields a
profile entry of that kind takes (checked when the profile loads, so a typo
fails before anything is touched), how an entry expands into plan lines, and
for the kinds that are settings (knobs.Knob) how they are read, written and
restored. The loader and the engine find the classes in registry.KINDS.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pyxdp.tuning.host import Host
    from pyxdp.tuning.knobs import Knob
    from pyxdp.tuning.preflight import Facts


class FieldError(ValueError):
    """An entry's field is wrong. The message says how; the loader adds where."""


# A field's check: given the field's name and value, raise FieldError if bad.
Check = Callable[[str, Any], None]


def text(key: str, value: Any) -> None:
    if not isinstance(value, str):
        raise FieldError(f"`{key}` must be a string (quote numbers: value = \"1\")")


def one_of(*choices: str) -> Check:
    spelled = " or ".join(f'"{choice}"' for choice in choices)

    def check(key: str, value: Any) -> None:
        if value not in choices:
            raise FieldError(f"`{key}` must be {spelled}")
    return check


def matching(pattern: re.Pattern, what: str) -> Check:
    """A string that matches PATTERN; WHAT names the expected thing in the message."""
    def check(key: str, value: Any) -> None:
        text(key, value)
        if not pattern.match(value):
            raise FieldError(f"{value!r} is not {what}")
    return check


def non_negative_int(key: str, value: Any) -> None:
    # bool is an int in Python, but `true` is no latency; nor is 10**5000.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 63:
        raise FieldError(f"`{key}` must be a non-negative integer")


def names(keys) -> str:
    """KEYS for a message, sorted, one line: a quoted key may hold a newline."""
    return ", ".join(k if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", k) else repr(k[:64])
                     for k in sorted(keys))


@dataclass(frozen=True)
class KnobSpec:
    """One `[[step.knob]]` entry, its fields checked by its kind's class."""

    kind: str
    fields: dict[str, Any]
    why: str | None = None  # replaces the step's why for this entry's rows

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)


@dataclass(frozen=True)
class Fixed:
    """A plan line with nothing to set: a note, a refusal, or a knob with no device."""

    label: str
    status: str
    reason: str
    kind: str
    before: str | None = None


class Kind:
    """A kind of profile entry. Subclasses set `kind` and `required`, and expand."""

    kind: ClassVar[str]
    # The fields an entry must have, and those it may have, each with its
    # check. `kind` itself, and `why`, which every entry may have, are not listed.
    required: ClassVar[dict[str, Check]] = {}
    optional: ClassVar[dict[str, Check]] = {}

    @classmethod
    def spec(cls, raw: dict[str, Any]) -> KnobSpec:
        """The entry RAW, checked; raises FieldError."""
        given = set(raw) - {"kind", "why"}
        missing = cls.required.keys() - given
        if missing:
            raise FieldError(f"{cls.kind} knob needs {', '.join(sorted(missing))}")
        checks = cls.required | cls.optional
        unknown = given - checks.keys()
        if unknown:
            raise FieldError(
                f"unknown field(s) {names(unknown)} for a {cls.kind} knob"
            )
        for key, check in checks.items():
            if key in given:
                check(key, raw[key])
        why = raw.get("why")
        if why is not None:
            text("why", why)
        fields = {key: raw[key] for key in given}
        cls.check_fields(fields)
        return KnobSpec(kind=cls.kind, fields=fields, why=why)

    @classmethod
    def check_fields(cls, fields: dict[str, Any]) -> None:
        """Rules across fields, once each field has passed its own check."""

    @classmethod
    def expand(cls, spec: KnobSpec, host: "Host", facts: "Facts",
               interfaces: Sequence[str]) -> list["Knob | Fixed"]:
        """The plan lines SPEC becomes on HOST, in the order they are applied."""
        raise NotImplementedError
