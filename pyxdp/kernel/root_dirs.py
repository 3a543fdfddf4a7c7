# SPDX-License-Identifier: Apache-2.0
"""Directories that only root may change: zerolayer's pin tree in bpffs and
its run directory.

bpffs is mounted mode 1777 by default, so any user can make
/sys/fs/bpf/zerolayer (or a directory, file or symlink inside one) before
root does; a root command that then walked or removed paths there would
work on what the user put in its way. So every use walks down from the
system's directory (which is trusted as it is) one directory at a time,
each opened with O_NOFOLLOW relative to its parent's fd, and each must be
a directory owned by root and writable by nobody else (on bpffs too, for
the pin tree); missing ones are made 0700. Once the chain holds, nothing
below it can be changed by anyone but root, so path-based calls inside it
(libbpf pinning its maps, BPF_OBJ_GET) are safe. Removal walks fds and never
follows a link: a symlink inside is refused and named, not followed.
A refusal is one line naming the path, what is wrong and the fix.
"""

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError

BPF_FS_MAGIC = 0xCAFE4A11  # include/uapi/linux/magic.h

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_libc = ctypes.CDLL(None, use_errno=True)


def fs_magic(fd: int) -> int:
    """f_type of fstatfs(2), the file system's magic (os.statvfs lacks it).
    It is the first member of struct statfs, a long on 64-bit Linux."""
    buf = ctypes.create_string_buffer(256)  # larger than struct statfs
    if _libc.fstatfs(fd, buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ctypes.c_ulong.from_buffer(buf).value & 0xFFFFFFFF


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a special file"


def refuse(path: str, what: str, fix: str) -> ZerolayerError:
    return ZerolayerError(f"{path} {what}: {fix} and run again")


@dataclass(frozen=True)
class Tree:
    """A directory of root's, TOP, inside a system directory (its parent,
    trusted as it is, but for a sticky bit where others may write).
    MAGIC: the file system every directory of it must be on."""

    top: str
    magic: int | None = None

    def path(self, *parts: str) -> str:
        return os.path.join(self.top, *parts)

    def _check(self, fd: int, path: str) -> None:
        st = os.fstat(fd)
        if st.st_uid not in (0, os.geteuid()):
            raise refuse(path, f"is owned by uid {st.st_uid}, not root",
                         f"remove it (`rm -r {path}`)")
        if st.st_mode & 0o022:
            raise refuse(path, f"is writable by group or others (mode {st.st_mode & 0o7777:04o})",
                         f"check what is in it and `chmod go-w {path}`")
        if self.magic is not None and fs_magic(fd) != self.magic:
            raise refuse(path, "is not on the bpf file system it should be on",
                         f"unmount what is mounted there (`umount {path}`)")

    def _open_base(self) -> int:
        base = os.path.dirname(self.top)
        try:
            fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise ZerolayerError(f"cannot open {base}: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if st.st_uid != 0 or (st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX):
                raise refuse(base, f"is writable by others without the sticky bit "
                                   f"(mode {st.st_mode & 0o7777:04o}, uid {st.st_uid}), so "
                                   f"anyone could replace {self.top}",
                             "mount it again as root's (for bpffs: "
                             f"`mount -t bpf -o mode=0700 bpf {base}`)")
            if self.magic is not None and fs_magic(fd) != self.magic:
                raise ZerolayerError(f"{base} is not a bpf file system: run "
                                     f"`mount -t bpf -o mode=0700 bpf {base}`")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _step(self, parent: int, name: str, path: str, create: bool) -> int | None:
        """NAME in the directory PARENT, opened without following a link and
        checked; None when it is not there (and not CREATE)."""
        if not name or name in (".", "..") or "/" in name:
            raise ZerolayerError(f"invalid name {name!r} under {self.top}")
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=parent)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            kind = _kind(os.lstat(name, dir_fd=parent).st_mode)
            raise refuse(path, f"is {kind}, not a directory",
                         f"remove it (`rm {path}`)") from None
        try:
            self._check(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def opened(self, *parts: str, create: bool = False) -> Iterator[int | None]:
        """An fd of TOP/PARTS..., each directory on the way checked (and
        made 0700 where missing, with CREATE); None when one is missing."""
        fd: int | None = self._open_base()
        try:
            path = os.path.dirname(self.top)
            for name in (os.path.basename(self.top), *parts):
                path = os.path.join(path, name)
                assert fd is not None
                child = self._step(fd, name, path, create)
                os.close(fd)
                fd = child
                if fd is None:
                    break
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def ensure(self, *parts: str) -> str:
        """Make TOP/PARTS... (0700 where missing) after checking each part;
        its path, safe to use as long as root alone holds the chain."""
        with self.opened(*parts, create=True):
            return self.path(*parts)

    def exists(self, *parts: str) -> bool:
        with self.opened(*parts) as fd:
            return fd is not None

    def listdir(self, *parts: str) -> list[str]:
        """The names in TOP/PARTS... ([] when it is not there)."""
        with self.opened(*parts) as fd:
            return [] if fd is None else sorted(os.listdir(fd))

    def remove(self, *parts: str, floor: int = 0) -> None:
        """Remove TOP/PARTS... and everything in it (unlinking a bpffs pin
        drops the pin), then each parent it left empty down to FLOOR parts
        below TOP (0: TOP too). A symlink or another user's directory
        inside is refused before anything is removed."""
        assert parts, "TOP itself goes only once emptied (FLOOR 0)"
        with self.opened(*parts[:-1]) as fd:
            if fd is None:
                return
            _remove_at(fd, parts[-1], self.path(*parts), self._check)
        self._prune(parts[:-1], floor)

    def unlink(self, *parts: str, floor: int = 0) -> None:
        """Unlink the file TOP/PARTS... (never a directory), then each
        parent it left empty down to FLOOR parts below TOP."""
        with self.opened(*parts[:-1]) as fd:
            if fd is None:
                return
            with contextlib.suppress(FileNotFoundError):
                os.unlink(parts[-1], dir_fd=fd)
        self._prune(parts[:-1], floor)

    def _prune(self, parents: tuple[str, ...], floor: int) -> None:
        for depth in range(len(parents), floor - 1, -1):
            if not self._rmdir_if_empty(parents[:depth]):
                break

    @contextlib.contextmanager
    def _base_fd(self) -> Iterator[int]:
        fd = self._open_base()
        try:
            yield fd
        finally:
            os.close(fd)

    def _rmdir_if_empty(self, parts: tuple[str, ...]) -> bool:
        with self.opened(*parts[:-1]) if parts else self._base_fd() as fd:
            if fd is None:
                return True
            name = parts[-1] if parts else os.path.basename(self.top)
            try:
                os.rmdir(name, dir_fd=fd)
            except FileNotFoundError:
                return True
            except OSError:
                return False  # not empty: someone else's pins, or a lock
            return True


def _remove_at(parent: int, name: str, path: str, check) -> None:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        kind = _kind(os.lstat(name, dir_fd=parent).st_mode)
        raise refuse(path, f"is {kind}, not a directory", f"remove it (`rm {path}`)") from None
    try:
        check(fd, path)
        _refuse_links(fd, path, check)
        _empty(fd)
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(name, dir_fd=parent)


def _refuse_links(fd: int, path: str, check) -> None:
    """Walk the tree under FD first, so that a symlink or another's
    directory deep inside stops the removal before anything went."""
    with os.scandir(fd) as entries:
        for e in entries:
            child = os.path.join(path, e.name)
            if e.is_symlink():
                raise refuse(child, "is a symbolic link", f"remove it (`rm {child}`)")
            if e.is_dir(follow_symlinks=False):
                sub = os.open(e.name, _DIR_FLAGS, dir_fd=fd)
                try:
                    check(sub, child)
                    _refuse_links(sub, child, check)
                finally:
                    os.close(sub)


def _empty(fd: int) -> None:
    with os.scandir(fd) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in names:
        if is_dir:
            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            try:
                _empty(sub)
            finally:
                os.close(sub)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(name, dir_fd=fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)


# zerolayer's run directory: locks, AF_XDP statistics, the tuning state.
# systemd's RuntimeDirectory makes it 0755 root, which passes.
RUN = Tree("/run/zerolayer")


def open_file(tree: Tree, *parts: str, flags: int, mode: int = 0o600,
              create_dirs: bool = False) -> int | None:
    """Open the file TREE/PARTS... without following a link (FLAGS as for
    os.open, O_NOFOLLOW and O_CLOEXEC added); its directories checked
    (made, with CREATE_DIRS). None when a directory or, without O_CREAT,
    the file is missing. Refused when it is not a regular file of root's."""
    *dirs, name = parts
    path = tree.path(*parts)
    with tree.opened(*dirs, create=create_dirs) as dfd:
        if dfd is None:
            return None
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode,
                         dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise refuse(path, "is a symbolic link", f"remove it (`rm {path}`)") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()):
        os.close(fd)
        raise refuse(path, f"is {_kind(st.st_mode)} of uid {st.st_uid}, not root's file",
                     f"remove it (`rm {path}`)")
    return fd
