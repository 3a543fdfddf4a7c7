# SPDX-License-Identifier: Apache-2.0
"""AF_XDP socket statistics, published by the process that owns the socket.

getsockopt(XDP_STATISTICS) answers only on the socket's own fd. The kernel
shows the statistics to other processes only through sock_diag, and only
when built with CONFIG_XDP_SOCKETS_DIAG, which many kernels (these VMs'
among them) lack. So a zerolayer listener writes each of its sockets'
statistics to a small JSON file about once a second and removes it when the
socket closes; the exporter reads them. A file whose writer is gone (killed
with -9) is stale: readers ignore it and remove it.

    /run/zerolayer/xsk/host/IFACE/QUEUE.json
    /run/zerolayer/xsk/ns:NETNS/IFACE/QUEUE.json
"""

import contextlib
import json
import os
import time
from dataclasses import dataclass

ROOT = "/run/zerolayer/xsk"
PUBLISH_EVERY_S = 1.0


def _netns_dir(netns: str | None) -> str:
    return os.path.join(ROOT, f"ns:{netns}" if netns else "host")


def _dir(ifname: str, netns: str | None) -> str:
    return os.path.join(_netns_dir(netns), ifname)


def path(ifname: str, netns: str | None, queue: int) -> str:
    return os.path.join(_dir(ifname, netns), f"{queue}.json")


def publish(xsk) -> None:
    """Write XSK's statistics (a pyxdp.xsk.XskSocket) atomically."""
    target = path(xsk.ifname, xsk.netns, xsk.queue)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    record = {
        "interface": xsk.ifname, "netns": xsk.netns, "queue": xsk.queue,
        "mode": xsk.mode, "inode": os.fstat(xsk.fileno()).st_ino, "pid": os.getpid(),
        "updated": time.time(), "statistics": xsk.statistics().to_json(),
    }
    staging = f"{target}.{os.getpid()}.tmp"
    with open(staging, "w") as f:
        json.dump(record, f)
    os.replace(staging, target)


def withdraw(xsk) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path(xsk.ifname, xsk.netns, xsk.queue))
    parent = _dir(xsk.ifname, xsk.netns)
    while parent.startswith(ROOT + os.sep):
        try:
            os.rmdir(parent)  # only when empty
        except OSError:
            break
        parent = os.path.dirname(parent)


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
    """The live sockets published for NETNS (None: the host); stale files
    are removed on the way."""
    found = []
    for root, _, names in os.walk(_netns_dir(netns)):
        for name in names:
            if not name.endswith(".json"):
                continue
            full = os.path.join(root, name)
            try:
                with open(full) as f:
                    rec = Published(**json.load(f))
            except (OSError, ValueError, TypeError):
                continue  # being replaced right now, or not ours
            if not os.path.exists(f"/proc/{rec.pid}"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(full)
                continue
            found.append(rec)
    return sorted(found, key=lambda r: (r.interface, r.queue))
