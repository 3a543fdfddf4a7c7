# SPDX-License-Identifier: Apache-2.0
"""Preflight: what this kernel has, before anything is written.

Every fact is asked of the kernel, never assumed: the congestion controls it
offers, which qdiscs it knows, whether /proc/sys is writable, which netns this
is. None of the questions changes anything. In particular a qdisc is probed in
a throwaway network namespace that only the probing thread ever sees (see
qdisc.kind_known), and never when asking would make the kernel load a module.
"""

import os
from dataclasses import dataclass, field

from pyxdp.tuning.host import Host
from pyxdp.tuning.qdisc import kind_known


@dataclass
class Facts:
    host: Host
    kernel: str
    initial_netns: bool | None
    proc_sys_writable: bool
    congestion_controls: tuple[str, ...] | None
    loadable_modules: frozenset
    cpufreq: bool
    cpuidle: bool
    irqbalance_pid: int | None
    _qdiscs: dict = field(default_factory=dict)

    def qdisc_available(self, kind: str) -> bool | None:
        """True or False; None when it cannot be told (a fake root)."""
        if self.host.fake:
            return None
        if kind not in self._qdiscs:
            if f"sch_{kind}" in self.loadable_modules:
                self._qdiscs[kind] = True  # the kernel loads it on first use
            else:
                try:
                    self._qdiscs[kind] = kind_known(kind)
                except OSError:  # no CAP_SYS_ADMIN for the throwaway netns
                    self._qdiscs[kind] = None
        return self._qdiscs[kind]

    def summary(self) -> dict:
        return {
            "where": self.host.where,
            "kernel": self.kernel,
            "initial_netns": self.initial_netns,
            "proc_sys_writable": self.proc_sys_writable,
            "congestion_controls": (
                list(self.congestion_controls)
                if self.congestion_controls is not None else None
            ),
            "qdiscs_checked": dict(sorted(self._qdiscs.items())),
            "cpufreq": self.cpufreq,
            "cpuidle": self.cpuidle,
            "irqbalance_pid": self.irqbalance_pid,
        }


def gather(host: Host) -> Facts:
    kernel = os.uname().release
    modules = frozenset() if host.fake else _loadable_modules(kernel)
    return Facts(
        host=host,
        kernel=kernel,
        initial_netns=_initial_netns(host),
        proc_sys_writable=_writable(os.path.join(host.proc, "sys")),
        congestion_controls=_congestion_controls(host, modules),
        loadable_modules=modules,
        cpufreq=_exists(host, "devices", "system", "cpu", "cpu0", "cpufreq"),
        cpuidle=_exists(host, "devices", "system", "cpu", "cpu0", "cpuidle"),
        irqbalance_pid=None if host.fake else _irqbalance_pid(),
    )


def _exists(host: Host, *parts: str) -> bool:
    try:
        return os.path.isdir(host.sys_path(*parts))
    except OSError:
        return False


def _writable(path: str) -> bool:
    try:
        return not os.statvfs(path).f_flag & os.ST_RDONLY
    except OSError:
        return False


def _initial_netns(host: Host) -> bool | None:
    if host.fake:
        return None
    if host.netns is not None:
        return False
    # kthreadd (pid 2 in the initial pid namespace) never leaves the initial
    # netns; pid 1 may be a supervisor we are not allowed to look at.
    try:
        with open("/proc/2/comm") as comm:
            if comm.read().strip() != "kthreadd":
                return None  # a pid namespace of our own: cannot tell
        init = os.stat("/proc/2/ns/net").st_ino
        mine = os.stat("/proc/thread-self/ns/net").st_ino
    except OSError:
        return None
    return mine == init


def _loadable_modules(kernel: str) -> frozenset:
    """Names of modules modprobe could load (sch_fq, tcp_bbr, ...)."""
    names = set()
    try:
        with open(f"/lib/modules/{kernel}/modules.dep") as dep:
            for line in dep:
                module = line.split(":", 1)[0].rsplit("/", 1)[-1]
                names.add(module.split(".ko", 1)[0].replace("-", "_"))
    except OSError:
        pass  # no modules directory: everything is built in, or absent
    return frozenset(names)


def _congestion_controls(host: Host, modules: frozenset) -> tuple[str, ...] | None:
    path = host.sysctl_path("net.ipv4.tcp_available_congestion_control")
    try:
        with open(path) as f:
            loaded = f.read().split()
    except OSError:
        return None
    # A congestion control in a module is available too: setting it loads it.
    loadable = sorted(m[len("tcp_"):] for m in modules if m.startswith("tcp_"))
    return tuple(loaded + [name for name in loadable if name not in loaded])


def _irqbalance_pid() -> int | None:
    import psutil

    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == "irqbalance":
            return proc.pid
    return None
