# SPDX-License-Identifier: Apache-2.0
"""A sysfs that shows the current thread's network namespace.

/sys/class/net lists the devices of the namespace that *mounted* /sys, not of
the thread reading it, so after setns() the host's /sys still shows the host's
interfaces. `ip netns exec` solves this by forking into a new mount namespace
and mounting sysfs again. We do the same without a child process: fsopen() and
fsmount() make a detached sysfs mount (attached to no directory, invisible to
everyone else) whose device list is taken from the calling thread's netns.
It is reached through /proc/self/fd/N and vanishes when the fd is closed.
"""

import ctypes
import os

# These syscall numbers are the same on every architecture (they were added
# after the numbering was unified in Linux 5.1).
_SYS_FSOPEN = 430
_SYS_FSCONFIG = 431
_SYS_FSMOUNT = 432
_FSOPEN_CLOEXEC = 0x1
_FSCONFIG_CMD_CREATE = 6
_FSMOUNT_CLOEXEC = 0x1
_MOUNT_ATTR_NOSUID_NODEV_NOEXEC = 0x2 | 0x4 | 0x8

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def mount() -> int:
    """Return an fd for a fresh sysfs of this thread's netns. Close it when done."""
    fs_fd = _check(_libc.syscall(_SYS_FSOPEN, b"sysfs", _FSOPEN_CLOEXEC), "fsopen")
    try:
        _check(
            _libc.syscall(_SYS_FSCONFIG, fs_fd, _FSCONFIG_CMD_CREATE, None, None, 0),
            "fsconfig",
        )
        return _check(
            _libc.syscall(
                _SYS_FSMOUNT, fs_fd, _FSMOUNT_CLOEXEC, _MOUNT_ATTR_NOSUID_NODEV_NOEXEC
            ),
            "fsmount",
        )
    finally:
        os.close(fs_fd)
