# SPDX-License-Identifier: Apache-2.0
"""Load bpf/streams.c and place its probes: the syscall tracepoints (bcc
attaches them as it loads) and, on each TLS library found, uprobes on the
functions its row of pyxdp.streams.tls_libraries names (OpenSSL's
SSL_read, SSL_write, SSL_read_ex and SSL_write_ex; entry and return), by
file offset (pyxdp.kernel.uprobe): the library is opened as
pyxdp.streams.mapped_file checks it and its symbols read by
pyxdp.streams.elf_symbols, never by bcc, which would follow the paths a
library names (docs/spec.md §11.1).

Where the probes go is a cost decision (docs/spec.md §11.1): a tracepoint
pair costs tens of nanoseconds per syscall, a uprobe hit microseconds. So
the uprobes go on the OpenSSL files processes really map, and with --pid
only into those processes.
"""

import ctypes
import os
from collections.abc import Iterable

from pyxdp.cstruct import Layout
from pyxdp.errors import ZerolayerError
from pyxdp.human import escaped
from pyxdp.kernel import uprobe
from pyxdp.streams import btf, elf_symbols, libraries, mapped_file, tls_libraries
from pyxdp.xdp import compiler

SOURCE = "streams.c"

# Event kinds (bpf/streams.h), numbered from 1.
DATA, CONN, CLOSE, EXIT, LINK, FORK = 1, 2, 3, 4, 5, 6
SHARED = 1  # a CLOSE's flag: other descriptors still hold the socket's file
# The tls field of an exit's and a fork's key among the missed ends (zl_st_ends_missed)
EXIT_KEY, FORK_KEY = 2, 3
PIECE = 4096  # payload bytes per event
PIECES = 4  # events per call at most: a longer call is partly missed, and counted
# iovecs read per readv/writev/recvmsg/sendmsg (the first in up to PIECES pieces,
# the others in one each): asyncio on Python 3.12+ sends many small buffers at once
IOVS = 16
RING_PAGES = 4096  # 16 MiB of ring buffer: a quarter second of a flood on loopback
MAX_PIDS = 1024  # entries of zl_st_pids
# Calls in a row on an untracked socket that are not HTTP before it is
# ignored until closed: enough that a connection older than the observer,
# joined in the middle of a long body, is not given up before its next
# response (docs/spec.md §11.1).
IGNORE_AFTER = 64
# zl_st_ignored's mark of a connection the tracker evicted: ignored as the
# others are, and its close reported, so userspace forgets it then.
EVICTED = 0xFFFFFFFF

# struct zl_st_event (bpf/streams.h): change both together.
EVENT = Layout(
    "zl_st_event",
    ("ts", "Q"), ("id", "Q"), ("off", "Q"), ("aux", "Q"),
    ("tgid", "I"), ("len", "I"), ("fd", "i"), ("uid", "I"),
    ("kind", "B"), ("out", "B"), ("tls", "B"), ("flags", "B"),
    ("family", "H"), ("lport", "H"), ("rport", "H"), ("pad", "2x"), ("pad2", "4x"),
    ("laddr", "16s"), ("raddr", "16s"), ("comm", "16s"),
    ("data", f"{PIECE}s"),
)
HEADER_LEN = EVENT.size - PIECE

# The programs the loader keeps: one is named as bcc's "function", the rest
# are loaded beside it (every TLS library's, from the table).
UPROBE_PROGRAMS = tls_libraries.programs()

TRACEFS = "/sys/kernel/tracing"
BPF_PROG_TYPE_KPROBE = 2  # uprobes are kprobe programs


def c_defines() -> dict[str, int]:
    """The event's constants (bpf/streams.h), by C name."""
    return {"ZL_ST_PIECE": PIECE, "ZL_ST_DATA": DATA, "ZL_ST_CONN": CONN,
            "ZL_ST_CLOSE": CLOSE, "ZL_ST_EXIT": EXIT, "ZL_ST_LINK": LINK,
            "ZL_ST_FORK": FORK, "ZL_ST_SHARED": SHARED, "ZL_ST_EXIT_KEY": EXIT_KEY,
            "ZL_ST_FORK_KEY": FORK_KEY}


# The kernel struct fields the C reads: -D ZL_ST_OFF_<NAME> = byte offset.
KERNEL_FIELDS = {
    "TASK_FILES": ("task_struct", "files"),
    "TASK_TGID": ("task_struct", "tgid"),
    "TASK_GROUP_LEADER": ("task_struct", "group_leader"),
    "TASK_COMM": ("task_struct", "comm"),
    "TASK_SIGNAL": ("task_struct", "signal"),
    "SIGNAL_LIVE": ("signal_struct", "live"),
    "FILES_FDT": ("files_struct", "fdt"),
    "FDT_MAX_FDS": ("fdtable", "max_fds"),
    "FDT_FD": ("fdtable", "fd"),
    "FILE_INODE": ("file", "f_inode"),
    "FILE_PRIVATE": ("file", "private_data"),
    "INODE_MODE": ("inode", "i_mode"),
    "INODE_INO": ("inode", "i_ino"),
    "SOCKET_TYPE": ("socket", "type"),
    "SOCKET_SK": ("socket", "sk"),
    "SK_FAMILY": ("sock", "__sk_common.skc_family"),
    "SK_NUM": ("sock", "__sk_common.skc_num"),
    "SK_DPORT": ("sock", "__sk_common.skc_dport"),
    "SK_RCV_SADDR": ("sock", "__sk_common.skc_rcv_saddr"),
    "SK_DADDR": ("sock", "__sk_common.skc_daddr"),
    "SK_V6_RCV_SADDR": ("sock", "__sk_common.skc_v6_rcv_saddr"),
    "SK_V6_DADDR": ("sock", "__sk_common.skc_v6_daddr"),
}


# A file's reference count, read at close(2) to tell whether other
# descriptors (a forked process's, a dup's, one passed over a UNIX socket)
# still hold the socket: Linux 6.13 made it a file_ref_t, whose count is
# one less than the references (0: one), from an atomic_long_t f_count.
FILE_REFS = (("f_ref.refcnt", 1), ("f_count.counter", 0))


def kernel_offsets() -> dict[str, int]:
    """-D ZL_ST_OFF_* values for the running kernel, and how its file
    reference count counts (ZL_ST_FILE_REF_ZERO_BASED)."""
    types = btf.vmlinux()
    out = {f"ZL_ST_OFF_{name}": types.offset(struct_name, path)
           for name, (struct_name, path) in KERNEL_FIELDS.items()}
    for path, zero_based in FILE_REFS:
        try:
            out["ZL_ST_OFF_FILE_REF"] = types.offset("file", path)
        except ZerolayerError:
            continue
        out["ZL_ST_FILE_REF_ZERO_BASED"] = zero_based
        return out
    raise ZerolayerError("the kernel's struct file has neither f_ref nor f_count")


def load_flags(max_conns: int, filter_pids: bool) -> tuple[str, ...]:
    """The -D definitions of one load: the event's and the program's sizes,
    whether only zl_st_pids is watched, our own pid (never watched) and the
    running kernel's field offsets."""
    d = c_defines() | kernel_offsets() | {"ZL_ST_PIECES": PIECES, "ZL_ST_IOVS": IOVS,
                       "ZL_ST_MAX_CONNS": max_conns, "ZL_ST_RING_PAGES": RING_PAGES,
                       "ZL_ST_FILTER_PIDS": int(filter_pids), "ZL_ST_SELF": os.getpid(),
                       "ZL_ST_IGNORE_AFTER": IGNORE_AFTER,
                       "ZL_ST_EVICTED": EVICTED}
    return compiler.define_flags(d)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_SLAVE = 1 << 19


def ensure_tracefs() -> None:
    """bcc needs tracefs to place probes and to remove them. Where the host
    has none mounted, this process mounts one that only it sees: in a mount
    namespace of its own, a slave of the host's (mounts made later, such as
    `ip netns add`'s, still reach it), so nothing is left mounted on the host
    and no other observer can unmount it from under this one."""
    if os.path.isdir(f"{TRACEFS}/events") or os.path.isdir("/sys/kernel/debug/tracing/events"):
        return
    libc = _libc()
    for step, ok in (("unshare(CLONE_NEWNS)", lambda: libc.unshare(CLONE_NEWNS) == 0),
                     ("a private mount namespace", lambda: libc.mount(
                         None, b"/", None, MS_REC | MS_SLAVE, None) == 0),
                     (f"mount tracefs on {TRACEFS}", lambda: libc.mount(
                         b"tracefs", TRACEFS.encode(), b"tracefs", 0, None) == 0)):
        if not ok():
            err = os.strerror(ctypes.get_errno())
            raise ZerolayerError(f"tracefs is not mounted, and {step} failed ({err}): mount it "
                                 f"(`mount -t tracefs tracefs {TRACEFS}`) and run again")


class Probes:
    """The loaded program and every probe it has in place; close() removes
    them all."""

    def __init__(self, pids: Iterable[int] = (), max_conns: int = 20000):
        self.pids = sorted(set(pids))
        self.perf_fds: list[int] = []  # every uprobe's perf event
        self.attached: set[tuple[int, int, int]] = set()  # (dev, inode, pid or -1)
        self.libraries: dict[tuple[int, int], str] = {}  # (dev, inode): a path it was mapped by
        # (dev, inode): why its uprobes go only into the processes that map it, and those
        self.private: dict[tuple[int, int], tuple[str, list[int]]] = {}
        self.failed: dict[tuple[int, int], tuple[str, str]] = {}  # (dev, inode): (path, why)
        self.notes: list[str] = []  # one line for each of those, as it is found, names escaped
        ensure_tracefs()
        self.loaded = compiler.load(
            SOURCE, UPROBE_PROGRAMS[0], prog_type=BPF_PROG_TYPE_KPROBE,
            also=UPROBE_PROGRAMS[1:],
            cflags=load_flags(max_conns, bool(self.pids)))
        self.bpf = self.loaded.bpf
        if self.pids:
            table = self.bpf[b"zl_st_pids"]
            for pid in self.pids[:MAX_PIDS]:
                table[table.Key(pid)] = table.Leaf(1)

    def scan(self, pid_list: Iterable[int] | None = None) -> int:
        """Put uprobes on the OpenSSL libraries the processes of PID_LIST
        (default: ours to watch, or every process) map and that have none yet:
        host-wide on a file only root may write, else (and with --pid) into
        each process that maps it. Returns how many libraries got them."""
        if pid_list is None:
            pid_list = self.pids or libraries.pids()
        if self.pids:
            pid_list = [p for p in pid_list if p in self.pids]
        placed = 0
        for key, maps in libraries.scan(pid_list).items():
            if key in self.failed or (*key, -1) in self.attached:
                continue
            maps = [m for m in maps if (*key, m.pid) not in self.attached]
            if maps and self._place(key, maps):
                placed += 1
        return placed

    def _place(self, key: tuple[int, int], maps: list[libraries.Mapping]) -> bool:
        """Uprobes on the library KEY that MAPS map; whether any went in."""
        for mapping in maps:  # the first whose process is still there
            try:
                opened = mapped_file.open_mapped(mapping)
                break
            except mapped_file.Gone:
                continue
            except mapped_file.Refused as exc:
                self._refuse(key, mapping.path, str(exc))
                return False
        else:
            return False
        library = mapping.library
        try:
            try:
                offsets = elf_symbols.function_offsets(opened.fd, opened.st.st_size,
                                                       library.symbols())
            except elf_symbols.ElfRefused as exc:
                self._refuse(key, mapping.path, str(exc))
                return False
            if not offsets:
                self._refuse(key, mapping.path,
                             "it defines none of " + ", ".join(library.symbols()))
                return False
            why = mapped_file.owner_note(opened.st)
            targets = [m.pid for m in maps] if why or self.pids else [-1]
            placed = False
            for pid in targets:
                try:
                    self._attach(library, opened.path, offsets, pid)
                except ProcessLookupError:  # it ended since the scan
                    continue
                except OSError as exc:
                    self._refuse(key, mapping.path, str(exc))
                    return placed
                self.attached.add((*key, pid))
                placed = True
                if why:
                    if key not in self.private:
                        self.notes.append(
                            f"{escaped(mapping.path)} {why}: its uprobes go only into the "
                            "processes that map it, not host-wide")
                    self.private.setdefault(key, (why, []))[1].append(pid)
            if placed:
                self.libraries.setdefault(key, mapping.path)
            return placed
        finally:
            opened.close()

    def _attach(self, library: tls_libraries.TlsLibrary, path: str, offsets: dict[str, int],
                pid: int) -> None:
        """Entry and return probes on each function of LIBRARY at its offset
        in PATH, in process PID or (-1) every process: all of them, or none."""
        fds: list[int] = []
        try:
            for sym, offset in offsets.items():
                function = library.function(sym)
                for fn, ret in ((function.entry, False), (function.ret, True)):
                    fds.append(uprobe.attach(self.loaded.prog_fds[fn], path, offset,
                                             retprobe=ret, pid=pid))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        self.perf_fds += fds

    def _refuse(self, key: tuple[int, int], path: str, why: str) -> None:
        self.failed[key] = (path, why)
        self.notes.append(f"no uprobes on {escaped(path)}: {why}")

    def close(self) -> None:
        for fd in self.perf_fds:  # each uprobe goes with its perf event
            os.close(fd)
        self.perf_fds = []
        self.loaded.close()
