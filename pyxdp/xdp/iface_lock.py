# SPDX-License-Identifier: Apache-2.0
"""One lock per interface. Every command that changes an interface's
zerolayer state (attach, upgrade, config, forward on/off, detach) holds it
from its first check to its last write, so two never interleave:

    /run/zerolayer/lock/IFACE            an interface of this network namespace
    /run/zerolayer/lock/ns:NETNS/IFACE   an interface inside named netns NETNS

The key is the pin dir's (pins.py), so the lock guards exactly that
directory and the attachment its pins name. The files live outside bpffs,
which holds no regular files, and are never removed while their namespace
exists: a lock file unlinked while another command waits on it would give
the two different locks (remove_netns drops those of a namespace gone).
flock(2) dies with its holder, so a killed command never leaves it held.
The directories are root's and checked on every use, and a lock file is
opened without following a link (pyxdp.kernel.root_dirs).
"""

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable

from pyxdp.errors import ZerolayerError
from pyxdp.kernel.root_dirs import RUN, open_file
from pyxdp.xdp import pins

LOCKS = "lock"  # under /run/zerolayer
DEFAULT_WAIT_S = 30.0  # longer than a first attach's compile on a busy host
_POLL_S = 0.02


def _parts(ifname: str | None, netns: str | None) -> tuple[str, ...]:
    """The lock's place under /run/zerolayer: its pin dir's under the pin root."""
    return (LOCKS, *pins.tree_parts(ifname, netns))


def _holder(fd: int) -> str:
    raw = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return f" (pid {raw})" if raw.isdigit() else ""


@contextlib.contextmanager
def file_held(parts: tuple[str, ...], wait_s: float, busy: Callable[[str], str],
              stopped: Callable[[], bool] = lambda: False):
    """Hold an flock on /run/zerolayer/PARTS... (created if need be) for the
    block, waiting up to WAIT_S seconds for it; if it stays taken,
    BUSY(holder) is the one-line error (HOLDER: " (pid N)" as the holder
    wrote it, or ""). STOPPED() true ends the wait as a timeout does
    (SIGTERM under `apply --watch`)."""
    try:
        fd = open_file(RUN, *parts, flags=os.O_RDWR | os.O_CREAT, create_dirs=True)
    except OSError as exc:
        raise ZerolayerError(f"cannot open the lock file {RUN.path(*parts)}: "
                             f"{exc.strerror}") from None
    assert fd is not None  # created, or refused
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno != errno.EWOULDBLOCK:
                    raise
            if time.monotonic() >= deadline or stopped():
                raise ZerolayerError(busy(_holder(fd)))
            time.sleep(_POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def held(ifname: str, netns: str | None, wait_s: float = DEFAULT_WAIT_S):
    """Hold IFNAME's lock for the block, waiting up to WAIT_S seconds for it;
    a one-line error, with nothing changed, if it stays taken."""
    where = f" in netns {netns}" if netns else ""
    return file_held(_parts(ifname, netns), wait_s, lambda holder: (
        f"another zerolayer command{holder} is changing {ifname}{where}; "
        "nothing was changed: try again, or wait longer with --wait SECONDS"))


def locked_netns() -> list[str]:
    """Namespaces with lock files."""
    return sorted(n[len(pins.NETNS_PREFIX):] for n in RUN.listdir(LOCKS)
                  if n.startswith(pins.NETNS_PREFIX))


def remove_netns(netns: str) -> None:
    """Drop the lock files of a namespace that is gone, when no command can
    still be using them (a test lab's after its teardown, or a namespace
    whose pins were just removed under each of its interfaces' locks)."""
    if netns:  # never the whole tree
        RUN.remove(*_parts(None, netns), floor=2)
