# SPDX-License-Identifier: Apache-2.0
"""Which processes the stream observer watches (docs/spec.md §11.6): by
pid, by a TCP port one of their sockets uses, by executable path, by
cgroup; a union. The kernel is told pids (zl_st_pids) and cgroup ids
(zl_st_cgroups), and follows each selected process's children itself
across fork; exec keeps the pid.

Everything here is read from the kernel's own files (/proc links read with
readlink, /proc/PID/net/tcp, cgroup.procs under /sys/fs/cgroup), nothing a
user can plant a FIFO or a symlink in for root to follow."""

import fnmatch
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.human import escaped
from pyxdp.kernel import procfs

CGROUP_ROOT = "/sys/fs/cgroup"  # where cgroup v2 is mounted, mostly (see cgroup_root)
_SOCKET = re.compile(r"socket:\[(\d+)\]")


@dataclass(frozen=True)
class Selection:
    pids: tuple[int, ...] = ()
    ports: tuple[tuple[int, int], ...] = ()  # inclusive ranges
    exes: tuple[str, ...] = ()  # shell globs on the executable's path
    cgroups: tuple[str, ...] = ()  # directories under CGROUP_ROOT

    @property
    def everything(self) -> bool:
        return not (self.pids or self.ports or self.exes or self.cgroups)

    def describe(self) -> str:
        """What is watched, for the first line; names escaped."""
        if self.everything:
            return "every process"
        parts = []
        if self.pids:
            parts.append("process " + ", ".join(map(str, sorted(self.pids))))
        if self.ports:
            parts.append("port " + ", ".join(str(lo) if lo == hi else f"{lo}-{hi}"
                                             for lo, hi in self.ports))
        if self.exes:
            parts.append("executable " + ", ".join(escaped(e) for e in self.exes))
        if self.cgroups:
            parts.append("cgroup " + ", ".join(escaped(c) for c in self.cgroups))
        return "the processes of " + "; ".join(parts) + " (and their children)"

    def matching(self, pids: Iterable[int]) -> set[int]:
        """Those of PIDS (running processes) the selection takes now."""
        pids = set(pids)
        out = pids & set(self.pids)
        if self.exes:
            out |= {pid for pid in pids - out if _exe_matches(pid, self.exes)}
        if self.cgroups:
            out |= pids & cgroup_members(self.cgroups)
        if self.ports:
            out |= _using_ports(pids - out, self.ports)
        return out


def parse_port_range(text: str) -> tuple[int, int]:
    """`8000` or `8000-8010`; ValueError with the reason."""
    lo_s, _, hi_s = text.partition("-")
    try:
        lo, hi = int(lo_s), int(hi_s or lo_s)
    except ValueError:
        raise ValueError(f"{escaped(text)} is not a port or a range of ports (8000, 8000-8010)") from None
    if not (1 <= lo <= hi <= 65535):
        raise ValueError(f"{escaped(text)}: ports are 1 to 65535, the lower first")
    return lo, hi


def cgroup_root() -> str | None:
    """Where the unified hierarchy (cgroup v2) is mounted: /sys/fs/cgroup,
    or /sys/fs/cgroup/unified on a host that mounts v1's controllers
    there (systemd's hybrid layout). None: no cgroup v2."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split()
            if " - " in line and line.split(" - ", 1)[1].split()[0] == "cgroup2":
                return fields[4].encode().decode("unicode_escape")
    return None


def cgroup_dir(text: str) -> str:
    """The cgroup TEXT names (a path in the unified hierarchy, with or
    without its mount point, as systemd and /proc/PID/cgroup's `0::` line
    write it), checked: a cgroup v2 directory, no `..`."""
    root = cgroup_root()
    if root is None:
        raise ZerolayerError(f"cgroup {escaped(text)}: this host has no cgroup v2 hierarchy "
                             "mounted (--cgroup reads the unified one)")
    rel = text.removeprefix(root).removeprefix(CGROUP_ROOT).strip("/")
    if ".." in rel.split("/"):
        raise ZerolayerError(f"cgroup {escaped(text)}: a path under {escaped(root)} without '..'")
    path = os.path.join(root, rel) if rel else root
    if not os.path.isfile(os.path.join(path, "cgroup.procs")):
        raise ZerolayerError(f"cgroup {escaped(text)}: no such cgroup ({escaped(path)} has no "
                             "cgroup.procs)")
    return path


def cgroup_members(cgroups: Iterable[str]) -> set[int]:
    """The processes in the cgroups (directories) and every cgroup below."""
    out: set[int] = set()
    for top in cgroups:
        for path, _dirs, _files in os.walk(top):  # cgroupfs holds no symlinks
            try:
                fd = os.open(os.path.join(path, "cgroup.procs"),
                             os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            except OSError:
                continue  # removed meanwhile
            try:
                data = os.read(fd, 1 << 20)
            finally:
                os.close(fd)
            out.update(int(p) for p in data.split() if p.isdigit())
    return out


def cgroup_ids(cgroups: Iterable[str]) -> set[int]:
    """The ids of the cgroups (directories) and of every cgroup below: a
    cgroup v2 id is its directory's inode number, what the kernel's
    bpf_get_current_cgroup_id() gives."""
    out: set[int] = set()
    for top in cgroups:
        for path, _dirs, _files in os.walk(top):
            try:
                out.add(os.stat(path, follow_symlinks=False).st_ino)
            except OSError:
                continue
    return out


def _exe_matches(pid: int, globs: tuple[str, ...]) -> bool:
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return False  # a kernel thread, or gone
    return any(fnmatch.fnmatchcase(exe, g) for g in globs)


def _port_sockets(pids: Iterable[int], ports: tuple[tuple[int, int], ...]) -> set[int]:
    """The inodes of TCP sockets with a local or remote port in PORTS, in
    every network namespace the processes PIDS are in."""
    seen_ns: set[str] = set()
    out: set[int] = set()
    for pid in pids:
        try:
            ns = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            continue
        if ns in seen_ns:
            continue
        seen_ns.add(ns)
        for table in ("tcp", "tcp6"):
            try:
                with open(f"/proc/{pid}/net/{table}", encoding="ascii", errors="replace") as f:
                    lines = f.readlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                if len(fields) < 10:
                    continue
                local, remote = (int(a.rpartition(":")[2], 16) for a in fields[1:3])
                if any(lo <= local <= hi or lo <= remote <= hi for lo, hi in ports):
                    out.add(int(fields[9]))
    out.discard(0)
    return out


def _using_ports(pids: set[int], ports: tuple[tuple[int, int], ...]) -> set[int]:
    inodes = _port_sockets(pids, ports)
    if not inodes:
        return set()
    out = set()
    for pid in pids:
        for _fd, link in procfs.fd_links(pid):
            m = _SOCKET.fullmatch(link)
            if m and int(m.group(1)) in inodes:
                out.add(pid)
                break
    return out
