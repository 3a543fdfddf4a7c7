# SPDX-License-Identifier: Apache-2.0
"""Where zerolayer pins its objects in bpffs, and how they are removed.

  /sys/fs/bpf/zerolayer/IFACE/            an interface of this network namespace
  /sys/fs/bpf/zerolayer/ns:NETNS/IFACE/   an interface inside named netns NETNS

':' can never appear in an interface name, so the two cannot collide.
Inside a pin dir: prog, counters, config, ports, xsks, flows, gaps, egress.
"""

import contextlib
import os

from pyxdp.errors import ZerolayerError
from pyxdp.kernel.bpffs import BPFFS

ROOT = os.path.join(BPFFS, "zerolayer")
NETNS_PREFIX = "ns:"

PROG = "prog"
PROG_STAGING = "prog_new"  # bpffs refuses '.' in names
MAPS = ("counters", "config", "ports", "xsks", "flows", "gaps", "egress")


def _check_name(kind: str, name: str) -> str:
    # The path becomes a C string literal for bcc: no quotes or backslashes.
    if not name or name in (".", "..") or any(c in name for c in '/"\\'):
        raise ZerolayerError(f"invalid {kind} name {name!r}")
    return name


def netns_dir(netns: str | None) -> str:
    if not netns:
        return ROOT
    return os.path.join(ROOT, NETNS_PREFIX + _check_name("netns", netns))


def pin_dir(ifname: str, netns: str | None = None) -> str:
    return os.path.join(netns_dir(netns), _check_name("interface", ifname))


def pinned_interfaces(netns: str | None = None) -> list[str]:
    """Interface names with a pin dir in NETNS's part of the tree."""
    base = netns_dir(netns)
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if not n.startswith(NETNS_PREFIX))


def pinned_netns() -> list[str]:
    try:
        names = os.listdir(ROOT)
    except FileNotFoundError:
        return []
    return sorted(n[len(NETNS_PREFIX):] for n in names if n.startswith(NETNS_PREFIX))


def _remove_tree(path: str) -> None:
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return
    for name in names:
        child = os.path.join(path, name)
        if os.path.isdir(child):
            _remove_tree(child)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(child)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(path)


def remove_dir(path: str) -> None:
    """Unpin everything in PATH, then drop PATH and any parents it emptied."""
    _remove_tree(path)
    parent = os.path.dirname(path)
    while parent.startswith(ROOT):
        try:
            os.rmdir(parent)  # only succeeds when empty
        except OSError:
            break
        parent = os.path.dirname(parent)


def remove_netns_tree(netns: str) -> None:
    """Drop every pin of a namespace, e.g. after the namespace is gone."""
    remove_dir(netns_dir(netns))
