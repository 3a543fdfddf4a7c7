# SPDX-License-Identifier: Apache-2.0
"""Named network namespaces: create, remove, and enter from the current thread.

setns(CLONE_NEWNET) moves only the calling thread, and a socket stays in the
namespace it was created in. So `with entered(ns): sock = socket(...)` gives a
socket inside NS while the rest of the process stays where it was. Netlink,
AF_PACKET, AF_XDP and UDP sockets all work this way.
"""

import contextlib
import ctypes
import errno
import os

from pyxdp.errors import ZerolayerError

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/run/netns"

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def path(name: str) -> str:
    return os.path.join(NETNS_RUN_DIR, name)


def exists(name: str) -> bool:
    return os.path.exists(path(name))


@contextlib.contextmanager
def entered(name: str | None):
    """Run the block with this thread inside netns NAME (None: stay put)."""
    if name is None:
        yield
        return
    try:
        target = os.open(path(name), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ZerolayerError(
            f"network namespace {name!r} does not exist (see `ip netns list`)"
        ) from None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            _setns(target)
        except PermissionError:
            raise ZerolayerError(
                f"entering network namespace {name!r} (--netns) needs CAP_SYS_ADMIN too, "
                "besides CAP_BPF and CAP_NET_ADMIN: run it with sudo"
            ) from None
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def create(name: str) -> None:
    from pyroute2 import netns as pr_netns

    pr_netns.create(name)


def remove(name: str) -> None:
    """Remove netns NAME; a namespace that is already gone is not an error."""
    from pyroute2 import netns as pr_netns

    try:
        pr_netns.remove(name)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
