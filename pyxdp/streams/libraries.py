# SPDX-License-Identifier: Apache-2.0
"""The TLS libraries running processes have mapped (a row of
pyxdp.streams.tls_libraries each), grouped by file.

A uprobe is placed on a file (an inode), so one library file shared by many
processes takes one set of probes, and processes that map it later are
covered without a new scan. Each mapping is reached through
/proc/PID/map_files/START-END, the very inode mapped (a container's own
copy too), whatever its path names now: the path read in /proc/PID/maps
is only shown, never opened. A process that maps no TLS library has its
own executable looked at instead (OpenSSL exported from Node's): the
mapping whose path is what /proc/PID/exe's link reads. readlink, not
stat: a stat would reach the file's file system, and a user's FUSE daemon
could hold root there. Stacks that
export nothing (Go's crypto/tls, stripped static BoringSSL, rustls) are
not seen.
"""

import os
from collections.abc import Iterable
from dataclasses import dataclass

from pyxdp.streams.tls_libraries import IN_EXECUTABLE, TlsLibrary, library_of


@dataclass(frozen=True)
class Mapping:
    pid: int  # the process that maps it
    path: str  # the path it was mapped by, as the process sees it: shown, never opened
    map_file: str  # /proc/PID/map_files/START-END: the mapped inode itself
    dev: int
    inode: int
    library: TlsLibrary  # its row: which functions to probe, and how


def mapped(pid: int) -> list[Mapping]:
    """The TLS library files process PID maps, one mapping each."""
    found: dict[tuple[int, int], Mapping] = {}
    executable: Mapping | None = None
    try:
        exe_path = os.readlink(f"/proc/{pid}/exe")  # the kernel's name for it: nothing opened
    except OSError:  # gone, a kernel thread, or not ours to see
        exe_path = None
    try:
        with open(f"/proc/{pid}/maps", "rb") as maps:
            for line in maps:
                fields = line.rstrip(b"\n").split(None, 5)
                if len(fields) < 6:
                    continue
                path = os.fsdecode(fields[5])
                library = library_of(path)
                start, _, end = fields[0].partition(b"-")
                major, _, minor = fields[3].partition(b":")
                key = (os.makedev(int(major, 16), int(minor, 16)), int(fields[4]))
                map_file = f"/proc/{pid}/map_files/{int(start, 16):x}-{int(end, 16):x}"
                if library is not None:
                    found.setdefault(key, Mapping(pid, path, map_file, *key, library))
                elif path == exe_path and executable is None and IN_EXECUTABLE:
                    executable = Mapping(pid, path, map_file, *key, IN_EXECUTABLE[0])
    except (OSError, ValueError):  # gone, or a kernel thread
        pass
    if not found and executable is not None:
        return [executable]
    return list(found.values())


def pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def scan(pid_list: Iterable[int]) -> dict[tuple[int, int], list[Mapping]]:
    """The distinct TLS library files (device, inode) the processes of PID_LIST
    map, each with its mappings, one a process."""
    seen: dict[tuple[int, int], list[Mapping]] = {}
    for pid in pid_list:
        for mapping in mapped(pid):
            seen.setdefault((mapping.dev, mapping.inode), []).append(mapping)
    return seen
