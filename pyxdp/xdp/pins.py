# SPDX-License-Identifier: Apache-2.0
"""Where zerolayer pins its objects in bpffs, and how they are removed.

  /sys/fs/bpf/zerolayer/IFACE/            an interface of this network namespace
  /sys/fs/bpf/zerolayer/ns:NETNS/IFACE/   an interface inside named netns NETNS

':' can never appear in an interface name, so the two cannot collide.
Inside a pin dir: prog, counters, config, ports, xsks, flows, gaps, egress.
"""

import os

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel import root_dirs
from pyxdp.kernel.bpffs import BPFFS

ROOT = os.path.join(BPFFS, "zerolayer")
NETNS_PREFIX = "ns:"
# Every use of the tree checks it is root's (pyxdp.kernel.root_dirs).
TREE = root_dirs.Tree(ROOT, root_dirs.BPF_FS_MAGIC)

PROG = "prog"
PROG_STAGING = "prog_new"  # bpffs refuses '.' in names
MAPS = ("counters", "config", "ports", "xsks", "xsks_sg", "flows", "gaps", "egress")


def _check_name(kind: str, name: str) -> str:
    # Kept plain (no quotes or backslashes): a pin path is printed and logged.
    # The kernel refuses ':' in an interface name, and the tree gives it to ns: dirs.
    bad = '/"\\\0' + (":" if kind == "interface" else "")
    if not name or name in (".", "..") or any(c in name for c in bad):
        raise ZerolayerError(f"invalid {kind} name {name!r}")
    return name


def tree_parts(ifname: str | None, netns: str | None) -> tuple[str, ...]:
    """The directories under ROOT of NETNS's part of the tree (and IFNAME's)."""
    ns = (NETNS_PREFIX + _check_name("netns", netns),) if netns else ()
    return ns + ((_check_name("interface", ifname),) if ifname is not None else ())


def netns_dir(netns: str | None) -> str:
    return TREE.path(*tree_parts(None, netns))


def pin_dir(ifname: str, netns: str | None = None) -> str:
    return TREE.path(*tree_parts(ifname, netns))


def ensure_pin_dir(ifname: str, netns: str | None = None) -> str:
    """IFNAME's pin dir, made (0700) where missing, each directory of it
    checked to be root's: libbpf and BPF_OBJ_PIN may then pin by path."""
    return TREE.ensure(*tree_parts(ifname, netns))


def has_pin_dir(ifname: str, netns: str | None = None) -> bool:
    return TREE.exists(*tree_parts(ifname, netns))


def pinned_interfaces(netns: str | None = None) -> list[str]:
    """Interface names with a pin dir in NETNS's part of the tree."""
    return [n for n in TREE.listdir(*tree_parts(None, netns)) if not n.startswith(NETNS_PREFIX)]


def pinned_netns() -> list[str]:
    return [n[len(NETNS_PREFIX):] for n in TREE.listdir() if n.startswith(NETNS_PREFIX)]


def stale_netns() -> list[str]:
    """Namespaces with pins whose namespace is gone (no /run/netns/NAME):
    nothing can reach their interfaces again, and their pins alone hold
    the programs and maps (spec §6.1)."""
    return [ns for ns in pinned_netns() if not netns_mod.exists(ns)]


def remove_pins(ifname: str, netns: str | None = None) -> None:
    """Unpin everything in IFNAME's pin dir, then drop it and any parents it emptied."""
    TREE.remove(*tree_parts(ifname, netns))


def remove_netns_tree(netns: str) -> None:
    """Drop every pin of a namespace, e.g. after the namespace is gone."""
    TREE.remove(*tree_parts(None, netns))


def rename(old: str, new: str, netns: str | None) -> None:
    """Move OLD's pin dir to NEW (an interface renamed since it was attached)."""
    ns = tree_parts(None, netns)
    with TREE.opened(*ns) as fd:
        if fd is None or not TREE.exists(*ns, _check_name("interface", old)):
            raise ZerolayerError(f"{pin_dir(old, netns)} is gone: nothing to rename")
        os.rename(old, _check_name("interface", new), src_dir_fd=fd, dst_dir_fd=fd)
