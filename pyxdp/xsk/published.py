# SPDX-License-Identifier: Apache-2.0
"""AF_XDP socket statistics, published by the process that owns the socket.

getsockopt(XDP_STATISTICS) answers only on the socket's own fd. The kernel
shows the statistics to other processes only through sock_diag, and only
when built with CONFIG_XDP_SOCKETS_DIAG, which many kernels (these VMs'
among them) lack. So a zerolayer listener writes each of its sockets'
statistics to a small JSON file about once a second and removes it when the
socket closes; the exporter reads them. A file whose writer is gone (killed
with -9) is stale: readers ignore it and never remove it (the exporter
reads a read-only /run/zerolayer); the next listener on that queue
replaces it, and /run is emptied at boot. The directories are root's
and checked on every use (pyxdp.kernel.root_dirs).

    /run/zerolayer/xsk/host/IFACE/QUEUE.json
    /run/zerolayer/xsk/ns:NETNS/IFACE/QUEUE.json
"""

import json
import os
import time
from dataclasses import dataclass

from pyxdp.kernel.root_dirs import RUN, open_file

PUBLISH_EVERY_S = 1.0
_MAX_BYTES = 64 * 1024  # a record is a few hundred bytes


def _netns_parts(netns: str | None) -> tuple[str, str]:
    return ("xsk", f"ns:{netns}" if netns else "host")


def path(ifname: str, netns: str | None, queue: int) -> str:
    return RUN.path(*_netns_parts(netns), ifname, f"{queue}.json")


def publish(xsk) -> None:
    """Write XSK's statistics (a pyxdp.xsk.XskSocket) atomically, replacing
    whatever an earlier listener of the same queue left."""
    record = {
        "interface": xsk.ifname, "netns": xsk.netns, "queue": xsk.queue,
        "mode": xsk.mode, "inode": os.fstat(xsk.fileno()).st_ino, "pid": os.getpid(),
        "updated": time.time(), "statistics": xsk.statistics().to_json(),
    }
    name = f"{xsk.queue}.json"
    staging = f"{name}.{os.getpid()}.tmp"
    with RUN.opened(*_netns_parts(xsk.netns), xsk.ifname, create=True) as dfd:
        assert dfd is not None  # made, or refused
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(staging, name, src_dir_fd=dfd, dst_dir_fd=dfd)


def withdraw(xsk) -> None:
    """The writer's own clean-up, when its socket closes."""
    RUN.unlink(*_netns_parts(xsk.netns), xsk.ifname, f"{xsk.queue}.json", floor=2)


def namespaces() -> list[str]:
    """Namespaces with published files."""
    return [n[len("ns:"):] for n in RUN.listdir("xsk") if n.startswith("ns:")]


def remove_netns(netns: str) -> None:
    """Drop what listeners of namespace NETNS published, stale files of
    killed ones included, once the namespace is gone (a test lab's)."""
    RUN.remove(*_netns_parts(netns), floor=1)


@dataclass(frozen=True)
class Published:
    interface: str
    netns: str | None
    queue: int
    mode: str
    inode: int
    pid: int
    updated: float  # time.time() of the write
    statistics: dict[str, int]


def read(netns: str | None) -> list[Published]:
    """The live sockets published for NETNS (None: the host). A stale file
    (its writer gone) is skipped, never removed: readers write nothing."""
    found = []
    where = _netns_parts(netns)
    for ifname in RUN.listdir(*where):
        for name in RUN.listdir(*where, ifname):
            if not name.endswith(".json"):
                continue
            fd = open_file(RUN, *where, ifname, name, flags=os.O_RDONLY)
            if fd is None:
                continue  # replaced right now
            try:
                with os.fdopen(fd, "rb") as f:
                    rec = Published(**json.loads(f.read(_MAX_BYTES)))
            except (OSError, ValueError, TypeError):
                continue  # being written, or not ours
            if os.path.exists(f"/proc/{rec.pid}"):
                found.append(rec)
    return sorted(found, key=lambda r: (r.interface, r.queue))
