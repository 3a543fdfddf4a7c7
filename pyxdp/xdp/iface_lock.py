# SPDX-License-Identifier: Apache-2.0
"""One lock per interface. Every command that changes an interface's
zerolayer state (attach, upgrade, config, forward on/off, detach) holds it
from its first check to its last write, so two never interleave:

    /run/zerolayer/lock/IFACE            an interface of this network namespace
    /run/zerolayer/lock/ns:NETNS/IFACE   an interface inside named netns NETNS

The key is the pin dir's (pins.py), so the lock guards exactly that
directory and the attachment its pins name. The files live outside bpffs,
which holds no regular files, and are never removed: a lock file unlinked
while another command waits on it would give the two different locks.
flock(2) dies with its holder, so a killed command never leaves it held.
"""

import contextlib
import errno
import fcntl
import os
import shutil
import time
from collections.abc import Callable

from pyxdp.errors import ZerolayerError
from pyxdp.xdp import pins

ROOT = "/run/zerolayer/lock"
DEFAULT_WAIT_S = 30.0  # longer than a first attach's compile on a busy host
_POLL_S = 0.02


def _beside(pin_path: str) -> str:
    """The path under ROOT that PIN_PATH has under the pin root."""
    return os.path.join(ROOT, os.path.relpath(pin_path, pins.ROOT))


def path(ifname: str, netns: str | None) -> str:
    return _beside(pins.pin_dir(ifname, netns))


def _holder(fd: int) -> str:
    raw = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return f" (pid {raw})" if raw.isdigit() else ""


@contextlib.contextmanager
def file_held(target: str, wait_s: float, busy: Callable[[str], str]):
    """Hold an flock on TARGET (created if need be) for the block, waiting up
    to WAIT_S seconds for it; if it stays taken, BUSY(holder) is the
    one-line error (HOLDER: " (pid N)" as the holder wrote it, or "")."""
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ZerolayerError(f"cannot open the lock file {target}: {exc.strerror}") from None
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno != errno.EWOULDBLOCK:
                    raise
            if time.monotonic() >= deadline:
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
    return file_held(path(ifname, netns), wait_s, lambda holder: (
        f"another zerolayer command{holder} is changing {ifname}{where}; "
        "nothing was changed: try again, or wait longer with --wait SECONDS"))


def locked_netns() -> list[str]:
    """Namespaces with lock files."""
    try:
        names = os.listdir(ROOT)
    except FileNotFoundError:
        return []
    return sorted(n[len(pins.NETNS_PREFIX):] for n in names if n.startswith(pins.NETNS_PREFIX))


def remove_netns(netns: str) -> None:
    """Drop the lock files of a namespace that is gone, when no command can
    still be using them (a test lab's, after its teardown)."""
    if netns:  # never the whole tree
        shutil.rmtree(_beside(pins.netns_dir(netns)), ignore_errors=True)
