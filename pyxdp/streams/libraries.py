# SPDX-License-Identifier: Apache-2.0
"""The OpenSSL libraries running processes have mapped, each once.

A uprobe is placed on a file (an inode), so one library file shared by many
processes takes one set of probes, and processes that map it later are
covered without a new scan. A process in a container maps its own copy,
found through /proc/PID/root. Statically linked TLS stacks (Go, BoringSSL
in Node, Bun or Envoy) map no libssl: they are not seen.
"""

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

# libssl.so.3 and libssl.so.1.1, the ABIs whose SSL_read/SSL_write the
# probes know.
_LIBSSL = re.compile(r"/libssl\.so\.(3|1\.1)$")


@dataclass(frozen=True)
class Library:
    path: str  # a path to the file this process can open (through /proc/PID/root)
    dev: int
    inode: int
    pid: int  # a process that maps it


def mapped(pid: int) -> set[str]:
    """Paths of the libssl files process PID maps, as it sees them."""
    found = set()
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if _LIBSSL.search(path):
                    found.add(path)
    except OSError:  # gone, or a kernel thread
        pass
    return found


def pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def scan(pid_list: Iterable[int]) -> list[Library]:
    """The distinct libssl files the processes of PID_LIST map."""
    seen: dict[tuple[int, int], Library] = {}
    for pid in pid_list:
        for path in mapped(pid):
            full = f"/proc/{pid}/root{path}"
            try:
                st = os.stat(full)
            except OSError:
                continue
            seen.setdefault((st.st_dev, st.st_ino), Library(full, st.st_dev, st.st_ino, pid))
    return list(seen.values())
