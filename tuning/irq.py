# SPDX-License-Identifier: Apache-2.0
"""A NIC's IRQ affinity, pinned to the CPUs of the NUMA node the NIC hangs off.

The device's IRQs and NUMA node come from sysfs (msi_irqs/ and numa_node of
the device or, for virtio, of the PCI function above it); the node's CPUs from
/sys/devices/system/node; the affinity is /proc/irq/N/smp_affinity_list.
psutil tells whether irqbalance is running, since it would move them back.
IRQs are the machine's, not a namespace's: this knob is global.
"""

import errno
import glob
import os
from collections.abc import Iterable, Sequence

from pyxdp.tuning.kind import KnobSpec, one_of
from pyxdp.tuning.knobs import FilesKnob, Unavailable, read_text, spread


def parse_cpulist(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def format_cpulist(cpus: Iterable[int]) -> str:
    ranges: list[list[int]] = []
    run: list[int] = []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            ranges.append(run)
        run = [cpu]
    if run:
        ranges.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in ranges)


class IrqAffinity(FilesKnob):
    """The IRQs of one interface; a profile entry pins those of each --interface."""

    kind = "irq_affinity"
    required = {"value": one_of("numa-local")}
    scope = "global"

    def __init__(self, host, facts, iface: str, irqs: list[int] | None = None):
        super().__init__(host, facts)
        self.iface = iface
        self.irqs = irqs

    @classmethod
    def expand(cls, spec: KnobSpec, host, facts, interfaces: Sequence[str]):
        return cls.per_interface(interfaces, lambda iface: cls(host, facts, iface),
                                 "IFACE irq affinity")

    @property
    def params(self):
        return {"iface": self.iface, "irqs": self._irqs()}

    @property
    def key(self):
        return f"{self.kind}:{self.iface}"

    @property
    def label(self):
        try:
            return f"{self.iface} irq {format_cpulist(self._irqs())} affinity"
        except (Unavailable, OSError):
            return f"{self.iface} irq affinity"

    def _device_chain(self) -> list[str]:
        """The device's sysfs directory and its parents up to /sys/devices."""
        link = self.host.sys_path("class", "net", self.iface, "device")
        if not os.path.exists(link):
            raise Unavailable(
                f"ENOENT: {self.iface} has no device in sysfs "
                "(a virtual interface has no IRQs of its own)"
            )
        top = os.path.realpath(self.host.sys_path("devices"))
        chain, path = [], os.path.realpath(link)
        while path.startswith(top + os.sep):
            chain.append(path)
            path = os.path.dirname(path)
        return chain

    def _irqs(self) -> list[int]:
        if self.irqs is None:
            for path in self._device_chain():
                msi = glob.glob(os.path.join(path, "msi_irqs", "[0-9]*"))
                if msi:
                    self.irqs = sorted(int(os.path.basename(m)) for m in msi)
                    break
                legacy = os.path.join(path, "irq")
                if os.path.exists(legacy) and int(read_text(legacy)) > 0:
                    self.irqs = [int(read_text(legacy))]
                    break
            else:
                raise Unavailable(f"ENOENT: found no IRQs of {self.iface} in sysfs")
        return self.irqs

    def _numa_node(self) -> int:
        for path in self._device_chain():
            node_file = os.path.join(path, "numa_node")
            if os.path.exists(node_file):
                return int(read_text(node_file))
        return -1

    def _paths(self) -> dict[str, str]:
        return {
            f"irq{irq}": os.path.join(self.host.proc, "irq", str(irq), "smp_affinity_list")
            for irq in self._irqs()
        }

    def target(self, value):
        # The only value `required` lets through is "numa-local".
        node = self._numa_node()
        nodes = glob.glob(self.host.sys_path("devices", "system", "node", "node[0-9]*"))
        if node < 0 and len(nodes) > 1:
            raise Unavailable(
                f"ENOENT: the firmware gives {self.iface} no NUMA node (numa_node -1), "
                "so no node is local to it"
            )
        if node < 0:
            # One node (or none): every CPU is local.
            cpus = read_text(self.host.sys_path("devices", "system", "cpu", "online"))
        else:
            cpus = read_text(
                self.host.sys_path("devices", "system", "node", f"node{node}", "cpulist")
            )
        return format_cpulist(parse_cpulist(cpus))

    def note(self) -> str | None:
        if self.facts.irqbalance_pid:
            return (
                f"irqbalance (pid {self.facts.irqbalance_pid}) is running and will "
                "move these IRQs again: stop it, or ban these CPUs in its config"
            )
        return None

    def same(self, a, b):
        keys = list(self._paths())
        try:
            left, right = spread(a, keys), spread(b, keys)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return False
            raise
        return all(parse_cpulist(left[k]) == parse_cpulist(right[k]) for k in keys)
