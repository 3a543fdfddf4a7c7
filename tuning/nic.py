# SPDX-License-Identifier: Apache-2.0
"""Per-device files in /sys/class/net/IFACE/, such as gro_flush_timeout."""

import re
from collections.abc import Sequence

from pyxdp.tuning import bound
from pyxdp.tuning.kind import KnobSpec, matching, one_of, text
from pyxdp.tuning.knobs import FileKnob


class NicAttr(FileKnob):
    """One attribute file of one interface; a profile entry sets it on each --interface."""

    kind = "nic"
    required = {
        "attr": matching(re.compile(r"^[a-z0-9_]+$"), "a /sys/class/net/IFACE attribute name"),
        "value": text,
    }
    optional = {"bound": one_of(*bound.BOUNDS)}
    scope = "netns"  # a device belongs to one namespace

    def __init__(self, host, facts, iface: str, attr: str):
        super().__init__(host, facts)
        self.iface = iface
        self.attr = attr

    @classmethod
    def check_fields(cls, fields):
        bound.check(fields)

    @classmethod
    def expand(cls, spec: KnobSpec, host, facts, interfaces: Sequence[str]):
        return cls.per_interface(interfaces, lambda iface: cls(host, facts, iface, spec["attr"]),
                                 f"IFACE/{spec['attr']}")

    @property
    def params(self):
        return {"iface": self.iface, "attr": self.attr}

    @property
    def label(self):
        return f"{self.iface}/{self.attr}"

    @property
    def path(self):
        return self.host.sys_path("class", "net", self.iface, self.attr)
