# SPDX-License-Identifier: Apache-2.0
"""Files root acts on (a configuration, a profile, tune's state): checked as
sshd's StrictModes checks a user's files, then read once with a bound
(docs/spec.md §10.1).

Whoever can change such a file decides what root does, so nobody but root
(or the user running the command) may be able to: the file, every directory
on the way to it and every symlink met, resolved here one component at a
time with no path walk that follows links, must be owned by root or the
invoking user, and no directory or file may be writable by its group or by
others. A directory writable by others but sticky (/tmp) is allowed above
the file: there only an entry's owner (or the directory's) may rename or
remove it, and the entry below it is checked to be root's or the user's.
The file must be a regular one (a FIFO would block the read, /dev/zero
would never end it) of at most MAX_BYTES, read with that bound in case it
grows meanwhile.
"""

import os
import pwd
import stat

from pyxdp.errors import ZerolayerError

MAX_BYTES = 1 << 20
_MAX_LINKS = 40  # symlinks followed in one path, as the kernel's ELOOP limit
_TYPES = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


class BadFile(ZerolayerError):
    """A file that is a command's input is refused, unreadable or wrong;
    the commands that read it exit 2."""


def read(path: str | os.PathLike, what: str, max_bytes: int = MAX_BYTES) -> bytes:
    """PATH's content, or BadFile naming it as WHAT ("the configuration")."""
    walk = _Walk(path, what)
    try:
        name, st = walk.resolve()
        if not stat.S_ISREG(st.st_mode):
            kind = _TYPES.get(stat.S_IFMT(st.st_mode), "not a file")
            raise walk.refuse(f"{walk.shown()} is {kind}, not a regular file")
        walk.writable(st, walk.here, directory=False)
        if st.st_size > max_bytes:
            raise walk.refuse(f"{st.st_size} bytes, more than the {max_bytes} zerolayer reads")
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=walk.dirs[-1][0])
        try:
            opened = os.fstat(fd)
            if (opened.st_ino, opened.st_dev) != (st.st_ino, st.st_dev):
                raise walk.refuse("it was replaced while being read")
            return walk.bounded(fd, max_bytes)
        finally:
            os.close(fd)
    except OSError as exc:
        raise BadFile(f"cannot read {what} {_printable(walk.path)}: {exc.strerror}") from None
    finally:
        walk.close()


def check_directory(path: str | os.PathLike, what: str) -> None:
    """BadFile unless PATH, WHAT ("state directory"), is a directory only
    root or the invoking user can change, as are those above it."""
    walk = _Walk(path, what)
    try:
        walk.resolve(directory=True)
    except OSError as exc:
        raise BadFile(f"cannot use {what} {_printable(walk.path)}: {exc.strerror}") from None
    finally:
        walk.close()


def _printable(path: str) -> str:
    """PATH on one line: quoted when it holds a control character."""
    return repr(path) if any(ord(c) < 32 or ord(c) == 127 for c in path) else path


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


class _Walk:
    """PATH resolved from /, one checked component at a time."""

    def __init__(self, path: str | os.PathLike, what: str):
        self.path = os.fspath(path)
        self.what = what
        self.trusted = {0, os.getuid()}
        self.dirs: list[tuple[int, str]] = []  # the directories down to `here`, as O_PATH fds
        self.here = "/"

    def refuse(self, problem: str) -> BadFile:
        return BadFile(f"refusing {self.what} {_printable(self.path)}: {problem}")

    def shown(self) -> str:
        """The component at fault: "it" when it is the path as given."""
        return "it" if self.here == os.path.abspath(self.path) else _printable(self.here)

    def resolve(self, directory: bool = False) -> tuple[str, os.stat_result]:
        """The last component's name in self.dirs[-1] and its stat, every
        component on the way checked; with DIRECTORY, the last one is a
        directory checked as those above it."""
        if "\0" in self.path:
            raise self.refuse("a path has no NUL character")
        todo = [p for p in os.path.abspath(self.path).split("/") if p][::-1]
        self._push(os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), "/")
        links = 0
        name, st = "/", os.fstat(self.dirs[-1][0])
        while todo:
            part = todo.pop()
            if part == "..":
                if len(self.dirs) > 1:
                    os.close(self.dirs.pop()[0])
                self.here = self.dirs[-1][1]
            if part in (".", ".."):
                name, st = ".", os.fstat(self.dirs[-1][0])
                continue
            parent = self.dirs[-1][0]
            self.here = os.path.join(self.dirs[-1][1], part)
            fd = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                st = os.fstat(fd)
                self.owned(st)
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > _MAX_LINKS:
                        raise self.refuse(f"more than {_MAX_LINKS} symbolic links")
                    target = os.readlink(part, dir_fd=parent)
                    if target.startswith("/"):
                        while len(self.dirs) > 1:
                            os.close(self.dirs.pop()[0])
                    todo.extend(p for p in target.split("/")[::-1] if p)
                    continue
                name = part
                if stat.S_ISDIR(st.st_mode) and (todo or directory):
                    fd, pushed = -1, fd
                    self._push(pushed, self.here)
                    name = "."
                elif todo:
                    raise self.refuse(f"{_printable(self.here)} is not a directory")
            finally:
                if fd >= 0:
                    os.close(fd)
        if directory and not stat.S_ISDIR(st.st_mode):
            raise self.refuse(f"{self.shown()} is not a directory")
        return name, st

    def _push(self, fd: int, path: str) -> None:
        """Go down into directory FD, once checked; it is closed with the walk."""
        self.here = path
        try:
            st = os.fstat(fd)
            self.owned(st)
            self.writable(st, path, directory=True)
        except BaseException:
            os.close(fd)
            raise
        self.dirs.append((fd, path))

    def owned(self, st: os.stat_result) -> None:
        if st.st_uid not in self.trusted:
            you = "" if os.getuid() == 0 else " or you"
            raise self.refuse(f"{self.shown()} is owned by {_owner(st.st_uid)}, not root{you}: "
                              f"chown root {_printable(self.here)}")

    def writable(self, st: os.stat_result, path: str, directory: bool) -> None:
        """Refuse a file, or a directory, that its group or others can write;
        a sticky directory is allowed (see the module's docstring)."""
        if not st.st_mode & 0o022 or (directory and st.st_mode & stat.S_ISVTX):
            return
        who = {0o020: "its group", 0o002: "others", 0o022: "its group and others"}
        bits = st.st_mode & 0o022
        flag = {0o020: "g", 0o002: "o", 0o022: "go"}[bits]
        raise self.refuse(f"{self.shown()} is writable by {who[bits]} "
                          f"(mode {stat.S_IMODE(st.st_mode):04o}): chmod {flag}-w {_printable(path)}")

    def bounded(self, fd: int, max_bytes: int) -> bytes:
        chunks, size = [], 0
        while chunk := os.read(fd, max_bytes + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise self.refuse(f"it grew past {max_bytes} bytes while being read")
        return b"".join(chunks)

    def close(self) -> None:
        for fd, _ in self.dirs:
            os.close(fd)
        self.dirs.clear()
