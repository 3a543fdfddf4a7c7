# SPDX-License-Identifier: Apache-2.0
"""A file another process maps, opened by root without ever waiting on it.

The observer runs as root; the libraries it probes may be anyone's
(docs/spec.md §11.1). An ordinary user can put a FIFO, a device or a FUSE
file where root looks, and an open(2) or a read of it never returns. So
the file is reached through /proc/PID/map_files (the inode mapped, not
what its path names now), first with O_PATH, which runs no driver's open:
only a regular file, not on FUSE, of a bounded size, is then opened for
reading, non-blocking, through /proc/self/fd of that O_PATH fd, and held
to be the same inode. The check says in one line why a file is refused.
"""

import ctypes
import os
import stat
from dataclasses import dataclass

from pyxdp.kernel import clib
from pyxdp.streams.libraries import Mapping

MAX_SIZE = 512 << 20  # a larger "library" is refused, unread
FUSE_SUPER_MAGIC = 0x65735546


class Refused(Exception):
    """The file is not one root opens: the message says why, in one line."""


class Gone(Exception):
    """The process or its mapping went away before the file was opened."""


@dataclass
class Opened:
    """The checked file, open for reading until close()."""

    fd: int
    st: os.stat_result

    @property
    def path(self) -> str:
        """A path to this very inode, in this process."""
        return f"/proc/self/fd/{self.fd}"

    def close(self) -> None:
        os.close(self.fd)


class _Statfs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("f_bsize", ctypes.c_long),
                ("f_blocks", ctypes.c_ulong), ("f_bfree", ctypes.c_ulong),
                ("f_bavail", ctypes.c_ulong), ("f_files", ctypes.c_ulong),
                ("f_ffree", ctypes.c_ulong), ("f_fsid", ctypes.c_int * 2),
                ("f_namelen", ctypes.c_long), ("f_frsize", ctypes.c_long),
                ("f_flags", ctypes.c_long), ("f_spare", ctypes.c_long * 4)]


_fstatfs = None


def fs_type(fd: int) -> int:
    """The filesystem magic of FD (an O_PATH fd will do, since Linux 3.12)."""
    global _fstatfs
    if _fstatfs is None:
        _fstatfs = clib.bind(clib.open_library("libc.so.6", "libc6"), "fstatfs", ctypes.c_int,
                             ctypes.c_int, ctypes.POINTER(_Statfs))
    buf = _Statfs()
    if _fstatfs(fd, ctypes.byref(buf)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return buf.f_type & 0xFFFFFFFF


def fuse_mounted(mapping: Mapping) -> bool:
    """Whether MAPPING's device is a FUSE mount in its process's mount
    namespace: read from /proc/PID/mountinfo, before any call reaches the
    filesystem (a FUSE file's fstat or fstatfs may wait on its daemon)."""
    dev = f"{os.major(mapping.dev)}:{os.minor(mapping.dev)}"
    try:
        with open(f"/proc/{mapping.pid}/mountinfo", "rb") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) > 3 and fields[2].decode() == dev and b"-" in fields:
                    fstype = fields[fields.index(b"-") + 1]
                    if fstype in (b"fuse", b"fuseblk") or fstype.startswith(b"fuse."):
                        return True
    except (OSError, ValueError):
        raise Gone from None
    return False


def open_mapped(mapping: Mapping) -> Opened:
    """The file of MAPPING, checked and open for reading. Refused with the
    reason, or Gone."""
    if fuse_mounted(mapping):
        raise Refused("it is on a FUSE filesystem, whose reads its daemon may hold for ever")
    try:
        handle = os.open(mapping.map_file, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        raise Gone from None
    except OSError as exc:
        raise Refused(f"it cannot be reached through {mapping.map_file}: "
                      f"{exc.strerror or exc}") from None
    try:
        if fs_type(handle) == FUSE_SUPER_MAGIC:
            raise Refused("it is on a FUSE filesystem, whose reads its daemon may hold for ever")
        st = os.fstat(handle)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("it is not a regular file")
        if (st.st_dev, st.st_ino) != (mapping.dev, mapping.inode):
            raise Gone
        if st.st_size > MAX_SIZE:
            raise Refused(f"it is {st.st_size} bytes long, more than {MAX_SIZE >> 20} MiB")
        fd = os.open(f"/proc/self/fd/{handle}",
                     os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise Refused(f"opening it failed: {exc.strerror or exc}") from None
    finally:
        os.close(handle)
    again = os.fstat(fd)
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(again.st_mode):
        os.close(fd)
        raise Refused("it changed while it was opened")
    return Opened(fd, again)


def owner_note(st: os.stat_result) -> str | None:
    """Why a file with status ST is not probed host-wide, or None when it is
    root's and only root may write it."""
    if st.st_uid != 0:
        return f"is owned by uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None
