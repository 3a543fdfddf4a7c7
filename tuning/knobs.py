# SPDX-License-Identifier: Apache-2.0
"""Knobs: the kinds that are settings, which the engine reads, writes and restores.

Every knob reads and writes its value as text, so that the engine, the state
file and the report treat all kinds alike. A knob that spans several files
(one per CPU, one per IRQ) shows one value when they agree and
`cpu0=a cpu1=b` when they do not; writing either form back restores it.

The kinds themselves live in their own modules (sysctl, nic, cpu, irq, qdisc);
this one has their base classes and the file helpers they share.
"""

import errno
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pyxdp.tuning.host import Host
from pyxdp.tuning.kind import Fixed, Kind, KnobSpec

if TYPE_CHECKING:
    from pyxdp.tuning.preflight import Facts


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
    if isinstance(exc, Unavailable) or exc.errno is None:
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


def require_qdisc(facts: "Facts", kind: str) -> None:
    """Raise Unavailable when the kernel is known to lack qdisc KIND."""
    if facts.qdisc_available(kind) is False:
        raise Unavailable(
            f"ENOENT: qdisc {kind!r} is not in this kernel (not built in, no module)"
        )


class Knob(Kind):
    """One setting: read it, write it, put the original back.

    The state file keeps `kind` and `params`, and --revert rebuilds the knob as
    `cls(host, facts, **params)`: whatever the constructor takes beyond those
    two must be in `params`, or have a default that revert can do with.
    """

    scope = "global"  # or "netns": lives inside a network namespace

    def __init__(self, host: Host, facts: "Facts"):
        self.host = host
        self.facts = facts

    @classmethod
    def expand(cls, spec, host, facts, interfaces):
        # One knob per host; kinds whose knobs take more than that override this.
        return [cls(host, facts)]

    @classmethod
    def asked(cls, spec: KnobSpec) -> str:
        """The value profile entry SPEC asks of this knob; target() checks it here."""
        return spec["value"]

    @classmethod
    def per_interface(cls, interfaces: Sequence[str], make: Callable[[str], "Knob"],
                      label: str) -> list["Knob | Fixed"]:
        """One knob per --interface, or, when none was named, a row that says so."""
        if not interfaces:
            return [Fixed(label, "skipped", "no --interface named, so no device to set",
                          cls.kind)]
        return [make(iface) for iface in interfaces]

    @property
    def params(self) -> dict[str, Any]:
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
