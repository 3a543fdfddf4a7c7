# SPDX-License-Identifier: Apache-2.0
"""The CPUs' side: the cpufreq governor and the idle states, one sysfs file per CPU."""

import glob
import os

from pyxdp.tuning.host import Host
from pyxdp.tuning.kind import KnobSpec, non_negative_int, text
from pyxdp.tuning.knobs import (
    FilesKnob,
    Knob,
    Unavailable,
    collapse,
    read_text,
    spread,
    write_files,
)


def cpu_dirs(host: Host) -> list[tuple[str, str]]:
    """(cpuN, path) for each CPU in sysfs, in numeric order."""
    base = host.sys_path("devices", "system", "cpu")
    found = []
    for path in glob.glob(os.path.join(base, "cpu[0-9]*")):
        name = os.path.basename(path)
        found.append((int(name[3:]), name, path))
    return [(name, path) for _, name, path in sorted(found)]


class Governor(FilesKnob):
    """cpufreq scaling_governor of every CPU."""

    kind = "governor"
    required = {"value": text}

    @property
    def label(self):
        return "cpufreq scaling_governor"

    def _paths(self) -> dict[str, str]:
        paths = {
            name: os.path.join(path, "cpufreq", "scaling_governor")
            for name, path in cpu_dirs(self.host)
            if os.path.exists(os.path.join(path, "cpufreq", "scaling_governor"))
        }
        if not paths:
            raise Unavailable(
                "ENOENT: no cpufreq in sysfs (no frequency scaling exposed; "
                "usual in a VM, where the hypervisor owns it)"
            )
        return paths

    def target(self, value):
        first = next(iter(self._paths().values()))
        offered = os.path.join(os.path.dirname(first), "scaling_available_governors")
        try:
            governors = read_text(offered).split()
        except OSError:
            return value  # the driver does not list them; the write will tell
        if value not in governors:
            raise Unavailable(
                f"EINVAL: governor {value!r} is not offered here "
                f"(offered: {' '.join(governors)})"
            )
        return value


class CpuIdle(Knob):
    """The CPU idle states deeper than a wake-up latency, disabled in sysfs.

    The value is, per CPU, the names of the disabled states (or `none`).
    This is what `cpupower idle-set -D` does; unlike a PM QoS request through
    /dev/cpu_dma_latency, it lasts after the process that set it exits.
    """

    kind = "cpuidle"
    required = {"max_latency_us": non_negative_int}

    @classmethod
    def asked(cls, spec: KnobSpec) -> str:
        return str(spec["max_latency_us"])

    @property
    def label(self):
        return "cpuidle states disabled"

    def _states(self) -> dict[str, list[str]]:
        """cpuN -> its stateM directories, in index order."""
        states = {}
        for cpu, path in cpu_dirs(self.host):
            found = glob.glob(os.path.join(path, "cpuidle", "state[0-9]*"))
            if found:
                states[cpu] = sorted(found, key=lambda d: int(os.path.basename(d)[5:]))
        if not states:
            raise Unavailable("ENOENT: no cpuidle states in sysfs (no idle driver)")
        return states

    def target(self, value):
        # VALUE is the profile's max_latency_us. States already disabled stay
        # disabled: this knob only adds the deep ones.
        max_latency_us = int(value)
        wanted = {}
        for cpu, dirs in self._states().items():
            names = [
                read_text(os.path.join(d, "name"))
                for d in dirs
                if int(read_text(os.path.join(d, "latency"))) > max_latency_us
                or read_text(os.path.join(d, "disable")) == "1"
            ]
            wanted[cpu] = ",".join(names) or "none"
        return collapse(wanted)

    def read(self):
        disabled = {}
        for cpu, dirs in self._states().items():
            names = [
                read_text(os.path.join(d, "name"))
                for d in dirs
                if read_text(os.path.join(d, "disable")) == "1"
            ]
            disabled[cpu] = ",".join(names) or "none"
        return collapse(disabled)

    def write(self, value):
        states = self._states()
        wanted = spread(value, states)
        paths, values = {}, {}
        for cpu, dirs in states.items():
            off = set(wanted[cpu].split(",")) - {"none"}
            for d in dirs:
                key = f"{cpu}/{os.path.basename(d)}"
                paths[key] = os.path.join(d, "disable")
                values[key] = "1" if read_text(os.path.join(d, "name")) in off else "0"
        write_files(paths, values)
