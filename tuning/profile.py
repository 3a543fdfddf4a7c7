"""Profiles are data: TOML files of ordered steps, each naming knobs, values and why.

A profile is found by name among the files shipped in `profiles/`, or read
from a path. Everything is checked on load, so a typo in a profile fails
before any knob is touched, with the file, step and field in the message.
"""

import os
import re
import tomllib
from dataclasses import dataclass
from importlib import resources

from pyxdp.errors import ZerolayerError

SCOPES = ("netns", "global")

# The fields each knob kind takes, besides `kind`. Every kind may also have a
# `why`, which replaces the step's reason for that one knob.
KNOB_FIELDS = {
    "sysctl": {"name", "value", "scope"},
    "qdisc": {"value"},
    "nic": {"attr", "value"},
    "irq_affinity": {"value"},
    "governor": {"value"},
    "cpuidle": {"max_latency_us"},
    "refuse": {"name", "value", "reason"},
    "note": {"name", "reason"},
}

SYSCTL_NAME = re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_/-]+)+$")
_STEP_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_NIC_ATTR = re.compile(r"^[a-z0-9_]+$")


@dataclass(frozen=True)
class KnobSpec:
    kind: str
    fields: dict
    why: str | None = None

    def __getitem__(self, name):
        return self.fields[name]

    def get(self, name, default=None):
        return self.fields.get(name, default)


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
    looks_like_path = os.sep in name_or_path or name_or_path.endswith(".toml")
    if looks_like_path:
        try:
            with open(name_or_path, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise ZerolayerError(
                f"cannot read profile {name_or_path}: {exc.strerror}"
            ) from None
        source = name_or_path
    else:
        entry = _profiles_dir() / f"{name_or_path}.toml"
        if not entry.is_file():
            raise ZerolayerError(
                f"no profile named {name_or_path!r}: choose one of "
                f"{', '.join(shipped())}, or give the path of a .toml file"
            )
        raw = entry.read_bytes()
        source = f"{name_or_path} (shipped)"
    return parse(raw.decode(), source)


def parse(text: str, source: str = "<string>") -> Profile:
    def fail(where: str, what: str):
        raise ZerolayerError(f"profile {source}: {where}: {what}")

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ZerolayerError(f"profile {source} is not valid TOML: {exc}") from None

    unknown = set(data) - {"name", "summary", "step"}
    if unknown:
        fail("top level", f"unknown field(s) {', '.join(sorted(unknown))}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        fail("top level", "needs a `name`")
    steps_raw = data.get("step")
    if not isinstance(steps_raw, list) or not steps_raw:
        fail("top level", "needs at least one [[step]]")

    steps = []
    seen_ids = set()
    for number, raw_step in enumerate(steps_raw, 1):
        where = f"step {number}"
        unknown = set(raw_step) - {"id", "why", "item", "knob"}
        if unknown:
            fail(where, f"unknown field(s) {', '.join(sorted(unknown))}")
        step_id = raw_step.get("id")
        if not isinstance(step_id, str) or not _STEP_ID.match(step_id):
            fail(where, "needs an `id` of lower-case letters, digits and dashes")
        if step_id in seen_ids:
            fail(where, f"id {step_id!r} is used twice")
        seen_ids.add(step_id)
        where = f"step {step_id!r}"
        why = raw_step.get("why")
        if not isinstance(why, str) or not why.strip():
            fail(where, "needs a one-line `why`")
        item = raw_step.get("item")
        if item is not None and not isinstance(item, int):
            fail(where, "`item` must be an integer")
        knobs_raw = raw_step.get("knob")
        if not isinstance(knobs_raw, list) or not knobs_raw:
            fail(where, "needs at least one [[step.knob]]")
        knobs = tuple(
            _parse_knob(raw, f"{where} knob {n}", fail)
            for n, raw in enumerate(knobs_raw, 1)
        )
        steps.append(Step(id=step_id, why=why.strip(), knobs=knobs, item=item))
    return Profile(name=name, summary=data.get("summary", ""), steps=tuple(steps))


def _parse_knob(raw: dict, where: str, fail) -> KnobSpec:
    kind = raw.get("kind")
    if kind not in KNOB_FIELDS:
        fail(where, f"`kind` must be one of {', '.join(KNOB_FIELDS)}")
    required = KNOB_FIELDS[kind]
    given = set(raw) - {"kind", "why"}
    missing = required - given
    if missing:
        fail(where, f"{kind} knob needs {', '.join(sorted(missing))}")
    unknown = given - required
    if unknown:
        fail(where, f"unknown field(s) {', '.join(sorted(unknown))} for a {kind} knob")
    fields = {key: raw[key] for key in given}

    for key in ("value", "name", "reason", "attr"):
        if key in fields and not isinstance(fields[key], str):
            fail(where, f"`{key}` must be a string (quote numbers: value = \"1\")")
    if kind in ("sysctl", "refuse") and not SYSCTL_NAME.match(fields["name"]):
        fail(where, f"{fields['name']!r} is not a sysctl name like net.core.rmem_max")
    if kind == "sysctl":
        if fields["scope"] not in SCOPES:
            fail(where, "`scope` must be \"netns\" or \"global\"")
        # Only net.* sysctls can be per-netns. Anything else written from
        # inside a namespace (kernel.*, vm.*) would change the whole host.
        if fields["scope"] == "netns" and not fields["name"].startswith("net."):
            fail(where, f"{fields['name']} is not under net.*, so it cannot be per-netns")
    if kind == "nic" and not _NIC_ATTR.match(fields["attr"]):
        fail(where, f"{fields['attr']!r} is not a /sys/class/net/IFACE attribute name")
    if kind == "irq_affinity" and fields["value"] != "numa-local":
        fail(where, "the only irq_affinity value is \"numa-local\"")
    if kind == "cpuidle":
        latency = fields["max_latency_us"]
        if not isinstance(latency, int) or latency < 0:
            fail(where, "`max_latency_us` must be a non-negative integer")
    why = raw.get("why")
    if why is not None and not isinstance(why, str):
        fail(where, "`why` must be a string")
    return KnobSpec(kind=kind, fields=fields, why=why)
