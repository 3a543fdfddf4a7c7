# SPDX-License-Identifier: Apache-2.0
"""The BPF filesystem, where pinned objects outlive the process that made them."""

import os

from pyxdp.errors import ZerolayerError

BPFFS = "/sys/fs/bpf"
# mode=0700: by default bpffs is 1777, and any user may make the
# directories root's pins go in (pyxdp.kernel.root_dirs checks them).
MOUNT = f"mount -t bpf -o mode=0700 bpf {BPFFS}"


def require_bpffs() -> None:
    fstype = None
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            _, mountpoint, kind, *_ = line.split()
            if mountpoint == BPFFS:
                fstype = kind  # the last mount on a path is the one in effect
    if fstype == "bpf":
        return
    if _in_other_netns():
        raise ZerolayerError(
            f"bpffs is not visible on {BPFFS} here (`ip netns exec` mounts a fresh /sys): "
            "run zerolayer from the host with --netns NS instead"
        )
    raise ZerolayerError(
        f"bpffs is not mounted on {BPFFS}: run `{MOUNT}` (vagrant/provision.sh does this)"
    )


def mode() -> int:
    """The permission bits of bpffs's root (1777 unless mounted with mode=)."""
    return os.stat(BPFFS).st_mode & 0o7777


def open_mode_note(bits: int) -> str | None:
    """A note when any user may make directories on bpffs (BITS: mode())."""
    if not bits & 0o002:
        return None
    return (f"bpffs on {BPFFS} is mode {bits:04o}: any user can make directories in it "
            f"(zerolayer refuses any of its own that are not root's); mount it root's alone: "
            f"`umount {BPFFS} && {MOUNT}`, with nothing pinned")


def require_writable(action: str) -> None:
    """Raise unless bpffs can take new pins and lose old ones. Checked before
    a command changes anything, so that a read-only bpffs stops it whole
    rather than halfway (a program detached, its pins left)."""
    if os.statvfs(BPFFS).f_flag & os.ST_RDONLY:
        raise ZerolayerError(
            f"{action}: bpffs on {BPFFS} is mounted read-only, so nothing was changed: "
            f"remount it read-write (`mount -o remount,rw {BPFFS}`)"
        )


def _in_other_netns() -> bool:
    """True inside a network namespace other than the initial one (pid 2,
    kthreadd, always lives in the initial one)."""
    try:
        return os.stat("/proc/self/ns/net").st_ino != os.stat("/proc/2/ns/net").st_ino
    except OSError:
        return False
