# SPDX-License-Identifier: Apache-2.0
"""Profiles are data: TOML files of ordered steps, each naming knobs, values and why.

A profile is found by name among the files shipped in `profiles/`, or read
from a path. Everything is checked on load, so a typo in a profile fails
before any knob is touched, with the file, step and field in the message.
Each `[[step.knob]]` is checked by the class of its kind (registry.KINDS).

`include = "NAME"` at the top builds on another profile (a shipped name, or a
path taken relative to the including file):
- the included profile's steps come first, in their order, then the
  including profile's own;
- an own step with the id of an included step replaces it, and stands where
  the including profile puts it. It keeps whatever it does not give: a step
  with only `id` and `item` moves the included step here and numbers it; a
  `why` replaces the why; `[[step.knob]]` entries replace all of its knobs.
  So a profile that names every included step reads in the order it applies;
- includes nest; a cycle, or an include that cannot be found, fails on load.
"""

import os
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from pyxdp import toml_file, trusted_file
from pyxdp.tuning.kind import FieldError, KnobSpec, names
from pyxdp.tuning.registry import KINDS

_STEP_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_STEP_FIELDS = {"id", "why", "item", "knob"}
_MAX_ITEM = 1 << 31


class ProfileError(trusted_file.BadFile):
    """A profile that cannot be read, is refused, or is wrong (exit 2)."""


@dataclass(frozen=True)
class Step:
    id: str
    why: str
    knobs: tuple[KnobSpec, ...]
    item: int | None = None  # the checklist item this step answers, if any


@dataclass(frozen=True)
class Profile:
    name: str
    summary: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class _Source:
    """A profile's text, the name messages give it, and what tells it apart in a cycle."""

    text: str
    label: str
    key: str
    directory: str | None  # where the paths it includes are taken from


def _profiles_dir():
    return resources.files(__package__) / "profiles"


def shipped() -> list[str]:
    """Names of the profiles that ship with zerolayer, sorted."""
    return sorted(
        entry.name[: -len(".toml")]
        for entry in _profiles_dir().iterdir()
        if entry.name.endswith(".toml")
    )


def load(name_or_path: str) -> Profile:
    """Load a shipped profile by name, or a profile file by path."""
    source = _read(name_or_path, None)
    return _parse(source, chain=(source,))


def parse(text: str, source: str = "<string>") -> Profile:
    """The profile in TEXT, called SOURCE in messages; it includes paths from the cwd."""
    string = _Source(text, source, source, None)
    return _parse(string, chain=(string,))


def _read(name_or_path: str, directory: str | None) -> _Source:
    if os.sep in name_or_path or name_or_path.endswith(".toml"):
        # A profile is what root writes to the kernel: one only root can
        # change (trusted_file). Those shipped are the package's own, as
        # trusted as the code beside them.
        path = os.path.join(directory or "", name_or_path)
        try:
            raw = trusted_file.read(path, "profile")
        except trusted_file.BadFile as exc:
            raise ProfileError(str(exc)) from None
        return _Source(toml_file.decode(raw, f"profile {path}", ProfileError), path,
                       os.path.realpath(path), os.path.dirname(path))
    entry = _profiles_dir() / f"{name_or_path}.toml"
    if "\0" in name_or_path or not entry.is_file():
        raise ProfileError(
            f"no profile named {name_or_path!r}: choose one of "
            f"{', '.join(shipped())}, or give the path of a .toml file"
        )
    label = f"{name_or_path} (shipped)"
    return _Source(entry.read_bytes().decode(), label, label, None)


def _error(source: _Source, where: str, what: str) -> ProfileError:
    return ProfileError(f"profile {source.label}: {where}: {what}")


def _parse(source: _Source, chain: tuple[_Source, ...]) -> Profile:
    """SOURCE's profile; CHAIN is the includes that led here, SOURCE last."""
    data = toml_file.parse(source.text, f"profile {source.label}", ProfileError)

    unknown = set(data) - {"name", "summary", "include", "step"}
    if unknown:
        raise _error(source, "top level", f"unknown field(s) {names(unknown)}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise _error(source, "top level", "needs a `name`")
    summary = data.get("summary", "")
    if not isinstance(summary, str):
        raise _error(source, "top level", "`summary` must be a string")
    included = _include(data["include"], source, chain) if "include" in data else ()
    steps_raw = data.get("step", [])
    if (not isinstance(steps_raw, list) or not all(isinstance(s, dict) for s in steps_raw)
            or not (steps_raw or included)):
        raise _error(source, "top level", "needs at least one [[step]]")

    own = _steps(steps_raw, source, {step.id: step for step in included})
    replaced = {step.id for step in own}
    steps = tuple(step for step in included if step.id not in replaced) + own
    return Profile(name=name, summary=summary, steps=steps)


def _include(name: Any, source: _Source, chain: tuple[_Source, ...]) -> tuple[Step, ...]:
    """The steps of the profile SOURCE includes."""
    if not isinstance(name, str) or not name:
        raise _error(source, "top level", "`include` must be the name or path of a profile")
    try:
        included = _read(name, source.directory)
    except ProfileError as exc:
        raise _error(source, "top level", f"include: {exc}") from None
    keys = [link.key for link in chain]
    if included.key in keys:
        loop = [link.label for link in chain[keys.index(included.key):]] + [included.label]
        raise _error(source, "top level", f"include cycle: {' -> '.join(loop)}")
    return _parse(included, chain + (included,)).steps


def _steps(steps_raw: list[dict], source: _Source,
           included: dict[str, Step]) -> tuple[Step, ...]:
    steps: list[Step] = []
    for number, raw in enumerate(steps_raw, 1):
        where = f"step {number}"
        unknown = set(raw) - _STEP_FIELDS
        if unknown:
            raise _error(source, where, f"unknown field(s) {names(unknown)}")
        step_id = raw.get("id")
        if not isinstance(step_id, str) or not _STEP_ID.match(step_id):
            raise _error(source, where, "needs an `id` of lower-case letters, digits and dashes")
        if any(step.id == step_id for step in steps):
            raise _error(source, where, f"id {step_id!r} is used twice")
        steps.append(_step(raw, source, f"step {step_id!r}", included.get(step_id)))
    return tuple(steps)


def _step(raw: dict, source: _Source, where: str, replaces: Step | None) -> Step:
    """The step RAW describes; what it leaves out comes from the step it REPLACES."""
    why = raw.get("why", replaces.why if replaces else None)
    if not isinstance(why, str) or not why.strip():
        raise _error(source, where, "needs a one-line `why`")
    item = raw.get("item", replaces.item if replaces else None)
    if item is not None and (not isinstance(item, int) or isinstance(item, bool)
                             or not 0 <= item < _MAX_ITEM):
        raise _error(source, where, "`item` must be a checklist number (an integer from 0)")
    if "knob" in raw:
        knobs_raw = raw["knob"]
        if not isinstance(knobs_raw, list) or not knobs_raw:
            raise _error(source, where, "needs at least one [[step.knob]]")
        knobs = tuple(_knob(entry, source, f"{where} knob {n}")
                      for n, entry in enumerate(knobs_raw, 1))
    elif replaces is not None:
        knobs = replaces.knobs
    else:
        raise _error(source, where, "needs at least one [[step.knob]]")
    return Step(id=raw["id"], why=why.strip(), knobs=knobs, item=item)


def _knob(raw: Any, source: _Source, where: str) -> KnobSpec:
    kind = raw.get("kind") if isinstance(raw, dict) else None
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise _error(source, where, f"`kind` must be one of {', '.join(KINDS)}")
    try:
        return cls.spec(raw)
    except FieldError as exc:
        raise _error(source, where, str(exc)) from None
