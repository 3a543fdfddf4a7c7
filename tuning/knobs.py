"""Knob kinds that are files: sysctls, per-NIC sysfs, CPU governor, CPU idle states.

Every knob reads and writes its value as text, so that the engine, the state
file and the report treat all kinds alike. A knob that spans several files
(one per CPU, one per IRQ) shows one value when they agree and
`cpu0=a cpu1=b` when they do not; writing either form back restores it.
"""

import errno
import glob
import os

from pyxdp.tuning.host import Host


class Unavailable(Exception):
    """This knob cannot be set here. The message is the one-line reason.

    `missing` is True when the host lacks what the knob needs (the case
    --strict makes fatal), False when zerolayer chose to leave it alone.
    """

    def __init__(self, reason: str, missing: bool = True):
        super().__init__(reason)
        self.missing = missing


_MEANING = {
    errno.ENOENT: "not in this kernel, or not in this netns",
    errno.ENODEV: "no such device here",
    errno.EROFS: "read-only file system here (as /proc/sys is in a container)",
    errno.EACCES: "permission denied (a file that is read-only here, or a missing capability)",
    errno.EPERM: "not permitted (a missing capability)",
}


def reason_for(exc: OSError | Unavailable, value: str | None = None) -> str:
    """One line for a failed read or write: the errno name, then what it means."""
    if isinstance(exc, Unavailable):
        return str(exc)
    name = errno.errorcode.get(exc.errno, f"errno {exc.errno}")
    if exc.errno in (errno.EINVAL, errno.ERANGE) and value is not None:
        return f"{name}: the kernel rejected {value!r}"
    return f"{name}: {_MEANING.get(exc.errno, exc.strerror or str(exc))}"


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def write_text(path: str, value: str) -> None:
    # Never O_CREAT: a knob that is not there must fail with ENOENT, under a
    # fake root as on the real /proc. O_TRUNC matters only for the fake root.
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, f"{value}\n".encode())
    finally:
        os.close(fd)


def collapse(values: dict[str, str]) -> str:
    """One value if all files agree, else `key=value` pairs in file order."""
    distinct = set(values.values())
    if len(distinct) == 1:
        return distinct.pop()
    return " ".join(f"{key}={value}" for key, value in values.items())


def spread(text: str, keys) -> dict[str, str]:
    """The inverse of collapse: a value for each key."""
    if "=" not in text:
        return {key: text for key in keys}
    pairs = dict(pair.split("=", 1) for pair in text.split())
    if set(pairs) != set(keys):
        raise OSError(errno.EINVAL, f"{text!r} does not name exactly {sorted(keys)}")
    return {key: pairs[key] for key in keys}


def write_files(paths: dict[str, str], values: dict[str, str]) -> None:
    """Write each file; if one fails, put back those already written, then raise."""
    done = []
    try:
        for key, path in paths.items():
            old = read_text(path)
            if old != values[key]:
                write_text(path, values[key])
                done.append((path, old))
    except OSError:
        for path, old in reversed(done):
            try:
                write_text(path, old)
            except OSError:
                pass  # the first error is the one worth reporting
        raise


def require_qdisc(facts, kind: str) -> None:
    """Raise Unavailable when the kernel is known to lack qdisc KIND."""
    if facts.qdisc_available(kind) is False:
        raise Unavailable(
            f"ENOENT: qdisc {kind!r} is not in this kernel (not built in, no module)"
        )


def cpu_dirs(host: Host) -> list[tuple[str, str]]:
    """(cpuN, path) for each CPU in sysfs, in numeric order."""
    base = host.sys_path("devices", "system", "cpu")
    found = []
    for path in glob.glob(os.path.join(base, "cpu[0-9]*")):
        name = os.path.basename(path)
        found.append((int(name[3:]), name, path))
    return [(name, path) for _, name, path in sorted(found)]


class Knob:
    """One setting: read it, write it, put the original back."""

    kind = ""
    scope = "global"  # or "netns": lives inside a network namespace

    def __init__(self, host: Host, facts):
        self.host = host
        self.facts = facts

    @property
    def params(self) -> dict:
        """What the state file keeps to rebuild this knob for --revert."""
        return {}

    @property
    def key(self) -> str:
        return ":".join([self.kind, *map(str, self.params.values())])

    @property
    def label(self) -> str:
        raise NotImplementedError

    def target(self, value: str) -> str:
        """The value to hold, from the profile's; raises Unavailable if it can't be."""
        return value

    def note(self) -> str | None:
        """Something the user should know even when the write succeeds."""
        return None

    def read(self) -> str:
        raise NotImplementedError

    def write(self, value: str) -> None:
        raise NotImplementedError

    def restore(self, original: str) -> None:
        self.write(original)

    def same(self, a: str, b: str) -> bool:
        return a.split() == b.split()


class FileKnob(Knob):
    """A knob that is one file, at `path`."""

    @property
    def path(self) -> str:
        raise NotImplementedError

    def read(self):
        return read_text(self.path)

    def write(self, value):
        write_text(self.path, value)


class FilesKnob(Knob):
    """A knob that is one file per CPU or per IRQ, from `_paths()`; see collapse."""

    def _paths(self) -> dict[str, str]:
        raise NotImplementedError

    def read(self):
        return collapse({key: read_text(path) for key, path in self._paths().items()})

    def write(self, value):
        paths = self._paths()
        write_files(paths, spread(value, paths))


class Sysctl(FileKnob):
    kind = "sysctl"

    def __init__(self, host, facts, name: str, scope: str):
        super().__init__(host, facts)
        self.name = name
        self.scope = scope

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


class NicAttr(FileKnob):
    """A per-device file in /sys/class/net/IFACE/, such as gro_flush_timeout."""

    kind = "nic"
    scope = "netns"  # a device belongs to one namespace

    def __init__(self, host, facts, iface: str, attr: str):
        super().__init__(host, facts)
        self.iface = iface
        self.attr = attr

    @property
    def params(self):
        return {"iface": self.iface, "attr": self.attr}

    @property
    def label(self):
        return f"{self.iface}/{self.attr}"

    @property
    def path(self):
        return self.host.sys_path("class", "net", self.iface, self.attr)


class Governor(FilesKnob):
    """cpufreq scaling_governor of every CPU."""

    kind = "governor"

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

    def __init__(self, host, facts, max_latency_us: int | None = None):
        super().__init__(host, facts)
        self.max_latency_us = max_latency_us

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
        # States already disabled stay disabled: this knob only adds the deep ones.
        wanted = {}
        for cpu, dirs in self._states().items():
            names = [
                read_text(os.path.join(d, "name"))
                for d in dirs
                if int(read_text(os.path.join(d, "latency"))) > self.max_latency_us
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
