# SPDX-License-Identifier: Apache-2.0
"""Load bpf/streams.bpf.c's object (built once by clang, fitted to the running
kernel by libbpf's CO-RE relocations) and place its probes: the syscall
and scheduler tracepoints (libbpf attaches them where their sections say)
and, on each TLS library found, uprobes on the
functions its row of pyxdp.streams.tls_libraries names (OpenSSL's
SSL_read, SSL_write, SSL_read_ex and SSL_write_ex; entry and return), by
file offset (pyxdp.kernel.uprobe): the library is opened as
pyxdp.streams.mapped_file checks it and its symbols read by
pyxdp.streams.elf_symbols, never by a symbol resolver (bcc's, libbpf's),
which would follow the paths a library names (docs/spec.md §11.1).

Where the probes go is a cost decision (docs/spec.md §11.1): a tracepoint
pair costs tens of nanoseconds per syscall, a uprobe hit microseconds. So
the uprobes go on the OpenSSL files processes really map, and with --pid
only into those processes.
"""

import contextlib
import ctypes
import functools
import mmap
import os
import platform
import struct
from collections.abc import Callable, Iterable

from pyxdp.cstruct import Layout
from pyxdp.errors import ZerolayerError
from pyxdp.human import escaped
from pyxdp.kernel import bpfsys, teardown, uprobe
from pyxdp.kernel.bpf_table import Table
from pyxdp.streams import elf_symbols, libraries, mapped_file, tls_libraries
from pyxdp.xdp import compiler

SOURCE = "streams.bpf.c"

# Event kinds (bpf/streams.h), numbered from 1.
DATA, CONN, CLOSE, EXIT, LINK, FORK = 1, 2, 3, 4, 5, 6
SHARED = 1  # a CLOSE's flag: other descriptors still hold the socket's file
# The tls field of an exit's and a fork's key among the missed ends (zl_st_ends_missed)
EXIT_KEY, FORK_KEY = 2, 3
PIECE = 4096  # payload bytes per event
PIECES = 4  # events per call at most: a longer call is partly missed, and counted
# iovecs read per readv/writev/recvmsg/sendmsg (the first in up to PIECES pieces,
# the others in one each): asyncio on Python 3.12+ sends many small buffers at once,
# and gRPC core sends a header block as a buffer per HPACK field (two dozen a request)
IOVS = 64
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

# The uprobe programs, every TLS library's (from the table): placed by
# pyxdp.kernel.uprobe, not by libbpf.
UPROBE_PROGRAMS = tls_libraries.programs()
# The tracepoint programs (bpf/streams.bpf.c), attached where their sections say.
SYSCALLS = ("read", "write", "recvfrom", "sendto", "readv", "writev", "recvmsg", "sendmsg")
TRACEPOINT_PROGRAMS = (*(f"zl_st_{edge}_{call}" for call in SYSCALLS for edge in ("enter", "exit")),
                       "zl_st_enter_close", "zl_st_process_exit", "zl_st_process_fork")

TRACEFS = "/sys/kernel/tracing"
VMLINUX_BTF = "/sys/kernel/btf/vmlinux"  # what libbpf fits the object's CO-RE reads to
BPF_PROG_TYPE_KPROBE = 2  # uprobes are kprobe programs (the bench counts their runs)


def c_defines() -> dict[str, int]:
    """The event's constants (bpf/streams.h), by C name."""
    return {"ZL_ST_PIECE": PIECE, "ZL_ST_DATA": DATA, "ZL_ST_CONN": CONN,
            "ZL_ST_CLOSE": CLOSE, "ZL_ST_EXIT": EXIT, "ZL_ST_LINK": LINK,
            "ZL_ST_FORK": FORK, "ZL_ST_SHARED": SHARED, "ZL_ST_EXIT_KEY": EXIT_KEY,
            "ZL_ST_FORK_KEY": FORK_KEY}


# The maps userspace reads or writes, with their C structs' layouts (key,
# value): struct zl_st_key, zl_st_conn, zl_st_link, zl_st_missed and
# zl_st_bio_thread (bpf/streams.bpf.c). Change both together.
KEY = "=IIQ"  # tgid, tls, id
TABLES = {
    "zl_st_conns": (KEY, "=QQBB6x"),  # seq[0], seq[1], skip, told
    "zl_st_ignored": (KEY, "=I"),
    "zl_st_ssl_fds": ("=I4xQ", "=Q"),
    "zl_st_fd_ssls": ("=I4xQ", "=Q"),
    "zl_st_bio_threads": ("=Q", "=Qq"),
    "zl_st_ends_missed": (KEY, "=QQQQ"),  # ts, off, aux, flags
    "zl_st_pids": ("=I", "=B"),
    "zl_st_cgroups": ("=Q", "=B"),
    "zl_st_tls_scratch": ("=Q", f"={EVENT.size}s"),
    "zl_st_refused": ("=I", "=Q"),  # by event kind: the ring was full
}
# Maps sized by --max-streams, at each load.
CONN_MAPS = ("zl_st_conns", "zl_st_ignored", "zl_st_ssl_fds", "zl_st_fd_ssls", "zl_st_procs")
RING = "zl_st_events"
# const volatile zl_st_config (bpf/streams.bpf.c): our pid, whether only zl_st_pids is
# watched, whether the processes of zl_st_cgroups are too
CONFIG = struct.Struct("=IIII")


def build_flags() -> tuple[str, ...]:
    """The -D definitions the object is built with: the event's, and how
    much one call copies. Nothing of one run's: the object is built once."""
    return compiler.define_flags(c_defines() | {
        "ZL_ST_PIECES": PIECES, "ZL_ST_IOVS": IOVS, "ZL_ST_IGNORE_AFTER": IGNORE_AFTER,
        "ZL_ST_EVICTED": EVICTED})


OBSERVER_BUILD = compiler.shipped(SOURCE, build_flags())


def _libc():
    return ctypes.CDLL(None, use_errno=True)


CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_SLAVE = 1 << 19


def ensure_tracefs() -> None:
    """libbpf needs tracefs to find a tracepoint's id. Where the host
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

    def __init__(self, pids: Iterable[int] = (), max_conns: int = 20000,
                 selective: bool | None = None, per_process: bool | None = None,
                 cgroups: bool = False):
        """PIDS are watched alone when SELECTIVE (default: when any is
        given); select() adds more. PER_PROCESS (default: SELECTIVE) puts
        the uprobes into the selected processes alone; otherwise a library
        only root can write gets them host-wide, and the program returns at
        once in a process not selected: a child forked by a selected
        process (a gateway's per-connection child) is then seen from its
        first call, which a uprobe placed into it after its fork would miss.
        CGROUPS: the processes of the cgroups select_cgroups() names are
        watched too, the kernel looking each call's cgroup up."""
        self.pids = sorted(set(pids))
        self.selective = bool(self.pids) if selective is None else selective
        self.per_process = self.selective if per_process is None else per_process
        self._pids_full = False
        self.perf_fds: list[int] = []  # every uprobe's perf event
        self.attached: set[tuple[int, int, int]] = set()  # (dev, inode, pid or -1)
        self.libraries: dict[tuple[int, int], str] = {}  # (dev, inode): a path it was mapped by
        # (dev, inode): why its uprobes go only into the processes that map it, and those
        self.private: dict[tuple[int, int], tuple[str, list[int]]] = {}
        self.failed: dict[tuple[int, int], tuple[str, str]] = {}  # (dev, inode): (path, why)
        # executables looked at that export no TLS function: not again
        self.without_tls: set[tuple[int, int]] = set()
        self.notes: list[str] = []  # one line for each of those, as it is found, names escaped
        if not os.path.exists(VMLINUX_BTF):
            raise ZerolayerError(
                f"this kernel ({platform.release()}) has no BTF ({VMLINUX_BTF}): the stream "
                "observer reads kernel structs through it (CO-RE); it needs a kernel built "
                "with CONFIG_DEBUG_INFO_BTF")
        ensure_tracefs()
        # built once; CO-RE fits it to this kernel's structs as it loads
        self.loaded = compiler.load(
            OBSERVER_BUILD, UPROBE_PROGRAMS[0], also=(*UPROBE_PROGRAMS[1:], *TRACEPOINT_PROGRAMS),
            attach=True, maps={name: name for name in (*TABLES, RING)},
            sizes={**dict.fromkeys(CONN_MAPS, max_conns), RING: RING_PAGES * mmap.PAGESIZE},
            rodata=CONFIG.pack(os.getpid(), int(self.selective), int(cgroups), 0))
        self.tables = {name: Table(self.loaded.map_fds[name], *TABLES[name]) for name in TABLES}
        self.ring_fd = self.loaded.map_fds[RING]
        for pid in self.pids[:MAX_PIDS]:
            self.tables["zl_st_pids"].set((pid,), (1,))

    def select(self, pids: Iterable[int]) -> list[int]:
        """Watch PIDS as well (the kernel's map, and their own uprobes at
        the next scan); the kernel adds a watched process's children
        itself. Returns those new here."""
        table = self.tables["zl_st_pids"]
        added = [pid for pid in sorted(set(pids) - set(self.pids))]
        for pid in added:
            try:
                table.set((pid,), (1,))
            except OSError:  # the map is full: said once
                if not self._pids_full:
                    self._pids_full = True
                    self.notes.append(f"more than {MAX_PIDS} processes selected: the rest "
                                      "are not watched")
                added = added[:added.index(pid)]
                break
        self.pids = sorted({*self.pids, *added})
        return added

    def select_cgroups(self, ids: Iterable[int]) -> None:
        """The cgroups (by id) whose processes are watched, as they are now."""
        table = self.tables["zl_st_cgroups"]
        ids = set(ids)
        for (old,) in table.keys():
            if old not in ids:
                table.delete((old,))
        for cgroup in ids:
            with contextlib.suppress(OSError):  # more than 1024: the rest unwatched
                table.set((cgroup,), (1,))

    def watched_pids(self) -> set[int]:
        """The processes the kernel watches: those selected, and the
        children it added at their forks."""
        return {k[0] for k in self.tables["zl_st_pids"].keys()}

    def unselect(self, pids: Iterable[int]) -> None:
        """PIDS have ended: out of the kernel's map, to keep it from filling."""
        gone = set(pids)
        for pid in gone:
            self.tables["zl_st_pids"].delete((pid,))
        self.pids = [p for p in self.pids if p not in gone]

    def scan(self, pid_list: Iterable[int] | None = None) -> int:
        """Put uprobes on the TLS libraries the processes of PID_LIST
        (default: ours to watch, or every process) map and that have none yet:
        host-wide on a file only root may write, else (and with --pid) into
        each process that maps it. Returns how many libraries got them."""
        if pid_list is None:
            pid_list = self.pids if self.selective else libraries.pids()
        if self.selective:
            pid_list = [p for p in pid_list if p in self.pids]
        placed = 0
        for key, maps in libraries.scan(pid_list).items():
            if key in self.failed or key in self.without_tls or (*key, -1) in self.attached:
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
                if library.files is None:  # an executable we only looked at
                    self.without_tls.add(key)
                else:
                    self._refuse(key, mapping.path, str(exc))
                return False
            if not offsets and library.files is None:
                self.without_tls.add(key)  # most executables: nothing to say
                return False
            if not offsets:
                self._refuse(key, mapping.path,
                             "it defines none of " + ", ".join(library.symbols()))
                return False
            why = mapped_file.owner_note(opened.st)
            targets = [m.pid for m in maps] if why or self.per_process else [-1]
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

    def skipped_runs(self) -> int:
        """The calls the kernel ran none of our programs for, because the
        CPU was inside another BPF program or a process's BPF system call
        (a program's recursion misses, Linux 5.12): their bytes, or their
        connection's end, never reached us."""
        return sum(bpfsys.prog_misses(fd) for fd in self.loaded.prog_fds.values())

    def close(self) -> None:
        # each uprobe goes with its perf event, each tracepoint with its
        # link: all at once, so the kernel's waits overlap
        jobs: list[Callable[[], None]] = [functools.partial(os.close, fd) for fd in self.perf_fds]
        jobs += [link.destroy for link in self.loaded.links]
        self.perf_fds, self.loaded.links = [], []
        try:
            teardown.run_all(jobs)
        finally:
            self.loaded.close()
