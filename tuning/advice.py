# SPDX-License-Identifier: Apache-2.0
"""The kinds that set nothing: a profile's answer to a line it does not apply.

A checklist names things that are not host settings, or not safe ones. Each
is still a row of the plan, with its reason, so the plan answers every line:
- `note`: not a host knob (a per-socket option, an environment variable, a
  limit that does not bind), skipped with the reason;
- `refuse`: a real sysctl zerolayer will not set, refused with the reason.
When the name is a sysctl this kernel has, the row shows its current value.
"""

from collections.abc import Sequence

from pyxdp.tuning.host import Host
from pyxdp.tuning.kind import Fixed, Kind, KnobSpec, text
from pyxdp.tuning.knobs import read_text
from pyxdp.tuning.sysctl import SYSCTL_NAME, sysctl_name


def _current(host: Host, name: str) -> str | None:
    if not SYSCTL_NAME.match(name):
        return None
    try:
        return read_text(host.sysctl_path(name))
    except OSError:
        return None


class Note(Kind):
    kind = "note"
    required = {"name": text, "reason": text}

    @classmethod
    def expand(cls, spec: KnobSpec, host: Host, facts, interfaces: Sequence[str]):
        return [Fixed(spec["name"], "skipped", spec["reason"], "note",
                      _current(host, spec["name"]))]


class Refuse(Kind):
    kind = "refuse"
    required = {"name": sysctl_name, "value": text, "reason": text}

    @classmethod
    def expand(cls, spec: KnobSpec, host: Host, facts, interfaces: Sequence[str]):
        return [Fixed(spec["name"], "refused", f"asked for {spec['value']}: {spec['reason']}",
                      "sysctl", _current(host, spec["name"]))]
