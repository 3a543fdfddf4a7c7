# SPDX-License-Identifier: Apache-2.0
"""sysctls: files under /proc/sys, named as sysctl(8) names them."""

import errno
import re
from collections.abc import Sequence
from typing import Any

from pyxdp.tuning import bound
from pyxdp.tuning.kind import FieldError, KnobSpec, matching, one_of, text
from pyxdp.tuning.knobs import FileKnob, Unavailable, require_qdisc

# A '/' stands for a dot inside a component (eth0/100), never at either end
# of one: "//" would be ".." once translated, a way out of /proc/sys.
SYSCTL_NAME = re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*)+$")
sysctl_name = matching(SYSCTL_NAME, "a sysctl name like net.core.rmem_max")

# sysctls that name a program the kernel runs as root (usermode helpers), or
# the capabilities those get: whoever writes a profile would choose what root
# runs. core_pattern is refused only as a pipe (or, since Linux 6.16, a
# socket the dump is sent to); a file name pattern is a setting.
RUNS_PROGRAMS = ("kernel.modprobe", "kernel.hotplug", "kernel.poweroff_cmd")
RUNS_PROGRAMS_UNDER = ("kernel.usermodehelper.", "fs.binfmt_misc.")


def runs_a_program(name: str, value: str) -> str | None:
    """Why setting sysctl NAME to VALUE would let a profile run a program
    as root, or None."""
    if name in RUNS_PROGRAMS or name.startswith(RUNS_PROGRAMS_UNDER):
        return (f"{name} names a program the kernel runs as root (or what it may do): "
                "no profile sets it")
    if name == "kernel.core_pattern" and value.lstrip()[:1] in ("|", "@"):
        return (f"{name} = {value[:40]!r}: the kernel would hand every crash's core dump to "
                "that program or socket, as root; no profile sets it (a file name pattern is fine)")
    return None


class Sysctl(FileKnob):
    """A sysctl, per network namespace (`scope = "netns"`) or host-wide."""

    kind = "sysctl"
    required = {"name": sysctl_name, "value": text, "scope": one_of("netns", "global")}
    # When the kernel has no such sysctl and that is fine (the feature it
    # would turn off is not built in), why: the row says so and --strict goes on.
    # `bound`: never move a value already past the profile's (tuning.bound).
    optional = {"if_missing": text, "bound": one_of(*bound.BOUNDS)}

    def __init__(self, host, facts, name: str, scope: str, if_missing: str | None = None):
        super().__init__(host, facts)
        self.name = name
        self.scope = scope
        self.if_missing = if_missing  # not in params: a recorded sysctl existed

    @classmethod
    def check_fields(cls, fields: dict[str, Any]) -> None:
        # Only net.* sysctls can be per-netns. Anything else written from
        # inside a namespace (kernel.*, vm.*) would change the whole host.
        if fields["scope"] == "netns" and not fields["name"].startswith("net."):
            raise FieldError(f"{fields['name']} is not under net.*, so it cannot be per-netns")
        refused = runs_a_program(fields["name"], fields["value"])
        if refused:
            raise FieldError(refused)
        bound.check(fields)

    @classmethod
    def expand(cls, spec: KnobSpec, host, facts, interfaces: Sequence[str]):
        return [cls(host, facts, spec["name"], spec["scope"], spec.get("if_missing"))]

    @property
    def params(self):
        return {"name": self.name, "scope": self.scope}

    @property
    def key(self):
        return f"sysctl:{self.name}"

    @property
    def label(self):
        return self.name

    @property
    def path(self):
        return self.host.sysctl_path(self.name)

    def read(self):
        try:
            return super().read()
        except OSError as exc:
            if exc.errno != errno.ENOENT or self.if_missing is None:
                raise
            raise Unavailable(f"ENOENT: {self.if_missing}", missing=False) from None

    def target(self, value):
        # Two values the kernel would only reject after a write; saying why
        # up front lets --dry-run tell the truth too.
        if self.name == "net.ipv4.tcp_congestion_control":
            available = self.facts.congestion_controls
            if available is not None and value not in available:
                raise Unavailable(
                    f"ENOENT: congestion control {value!r} is not in this kernel "
                    f"(available: {' '.join(available)})"
                )
        if self.name == "net.core.default_qdisc":
            require_qdisc(self.facts, value)
        return value
