# SPDX-License-Identifier: Apache-2.0
"""The bpf(2) system call through ctypes: pins, map elements, object info,
BPF_PROG_TEST_RUN and helper probes.

libbpf loads the programs' objects (pyxdp.xdp.libbpf); everything a fresh
process needs afterwards (status, stats, detach, AF_XDP registration, test
runs) goes through here, so those paths never open an object or build one.
"""

import contextlib
import ctypes
import errno
import functools
import os
import platform
import resource
import struct
from dataclasses import dataclass

_SYS_BPF = {"x86_64": 321, "aarch64": 280, "arm64": 280}

BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_OBJ_PIN = 6
BPF_OBJ_GET = 7
BPF_PROG_TEST_RUN = 10
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_MAP_LOOKUP_BATCH = 24
BPF_ENABLE_STATS = 32

BPF_ANY = 0
BPF_NOEXIST = 1  # map_update: only where the key has no entry yet

BPF_PROG_TYPE_TRACEPOINT = 5
BPF_PROG_TYPE_XDP = 6

BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1
BPF_F_XDP_HAS_FRAGS = 1 << 5  # prog_flags: the program takes multi-buffer packets (5.18)

_ATTR_SIZE = 128  # covers every command used here; the tail stays zero

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _nr() -> int:
    machine = platform.machine()
    if machine not in _SYS_BPF:
        raise OSError(f"bpf(2) syscall number unknown for {machine}")
    return _SYS_BPF[machine]


@functools.cache
def lift_memlock() -> None:
    """Before Linux 5.11 the kernel charges BPF maps and programs to the
    user's RLIMIT_MEMLOCK, whose default (8 MiB) the maps of an attachment
    or two use up: lift this process's limit, to infinity where it may (as
    libbpf does), else to its hard limit. Once per process."""
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY,) * 2)
    except (ValueError, OSError):
        _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))


def bpf(cmd: int, attr: ctypes.Array) -> int:
    """Run one bpf(2) command; raise OSError with errno on failure."""
    if cmd in (BPF_MAP_CREATE, BPF_PROG_LOAD):
        lift_memlock()
    ret = _libc.syscall(_nr(), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr)))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def _attr(fmt: str, *values) -> ctypes.Array:
    buf = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into(fmt, buf, 0, *values)
    return buf


def _addr(buf) -> int:
    return ctypes.addressof(buf) if buf is not None else 0


# --- pins ---------------------------------------------------------------------

def obj_pin(fd: int, path: str) -> None:
    name = ctypes.create_string_buffer(os.fsencode(path))
    bpf(BPF_OBJ_PIN, _attr("=QI", _addr(name), fd))


def obj_get(path: str) -> int:
    """Open a pinned object; returns a new fd the caller must close."""
    name = ctypes.create_string_buffer(os.fsencode(path))
    return bpf(BPF_OBJ_GET, _attr("=QI", _addr(name), 0))


def prog_fd_by_id(prog_id: int) -> int:
    return bpf(BPF_PROG_GET_FD_BY_ID, _attr("=I", prog_id))


# --- object info --------------------------------------------------------------

@dataclass(frozen=True)
class ProgInfo:
    type: int
    id: int
    tag: str
    name: str
    map_ids: tuple[int, ...]


@dataclass(frozen=True)
class MapInfo:
    type: int
    id: int
    key_size: int
    value_size: int
    max_entries: int
    name: str


def _info(fd: int, size: int) -> bytes:
    """BPF_OBJ_GET_INFO_BY_FD into a SIZE-byte buffer (the kernel fills what
    it knows of that prefix)."""
    info = ctypes.create_string_buffer(size)
    bpf(BPF_OBJ_GET_INFO_BY_FD, _attr("=IIQ", fd, size, _addr(info)))
    return info.raw


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def prog_info(fd: int) -> ProgInfo:
    raw = _info(fd, 96)
    nr_map_ids = struct.unpack_from("=I", raw, 52)[0]
    map_ids: tuple[int, ...] = ()
    if nr_map_ids:
        ids = (ctypes.c_uint32 * nr_map_ids)()
        # second call with the map_ids pointer (offset 56) and its length
        info = ctypes.create_string_buffer(96)
        struct.pack_into("=I", info, 52, nr_map_ids)
        struct.pack_into("=Q", info, 56, ctypes.addressof(ids))
        bpf(BPF_OBJ_GET_INFO_BY_FD, _attr("=IIQ", fd, 96, _addr(info)))
        map_ids = tuple(ids)
    ptype, pid = struct.unpack_from("=II", raw, 0)
    return ProgInfo(
        type=ptype,
        id=pid,
        tag=raw[8:16].hex(),
        name=_cstr(raw[64:80]),
        map_ids=map_ids,
    )


# struct bpf_prog_info: run_time_ns and run_cnt (both __u64), counted only
# while run-time statistics are on; recursion_misses (Linux 5.12; before,
# the kernel leaves it 0), always counted.
_RUN_TIME_NS = 192
_RECURSION_MISSES = 208
_PROG_INFO_LEN = 216
BPF_STATS_RUN_TIME = 0


def prog_run_stats(fd: int) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of a program, summed since it was loaded."""
    raw = _info(fd, _PROG_INFO_LEN)
    return struct.unpack_from("=QQ", raw, _RUN_TIME_NS)


def prog_misses(fd: int) -> int:
    """The times the kernel skipped a program because a BPF program, or a
    BPF system call of a process, held the CPU's guard (bpf_prog_active):
    the calls it saw none of."""
    raw = _info(fd, _PROG_INFO_LEN)
    return struct.unpack_from("=Q", raw, _RECURSION_MISSES)[0]


def enable_run_stats() -> int:
    """Turn on BPF programs' run-time statistics for as long as the returned
    fd is open (BPF_ENABLE_STATS, Linux 5.8). Unlike the global sysctl
    kernel.bpf_stats_enabled, nothing is left changed when the process dies:
    the kernel drops the count with the fd."""
    return bpf(BPF_ENABLE_STATS, _attr("=I", BPF_STATS_RUN_TIME))


@contextlib.contextmanager
def run_stats_on():
    """BPF run-time statistics on inside the block, and off again after it
    on every path (unless something else holds them on)."""
    fd = enable_run_stats()
    try:
        yield
    finally:
        os.close(fd)


def map_info(fd: int) -> MapInfo:
    raw = _info(fd, 80)
    mtype, mid, key_size, value_size, max_entries = struct.unpack_from("=IIIII", raw, 0)
    return MapInfo(mtype, mid, key_size, value_size, max_entries, _cstr(raw[24:40]))


# --- map elements -------------------------------------------------------------

def map_lookup(fd: int, key: bytes, value_size: int) -> bytes | None:
    """VALUE_SIZE is the whole buffer (per-CPU maps: rounded size x CPUs)."""
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(value_size)
    try:
        bpf(BPF_MAP_LOOKUP_ELEM, _attr("=IIQQQ", fd, 0, _addr(k), _addr(v), 0))
    except FileNotFoundError:
        return None
    return v.raw


def map_update(fd: int, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(value, len(value))
    bpf(BPF_MAP_UPDATE_ELEM, _attr("=IIQQQ", fd, 0, _addr(k), _addr(v), flags))


def map_delete(fd: int, key: bytes) -> bool:
    """Returns False when there was no such element."""
    k = ctypes.create_string_buffer(key, len(key))
    try:
        bpf(BPF_MAP_DELETE_ELEM, _attr("=IIQ", fd, 0, _addr(k)))
    except FileNotFoundError:
        return False
    return True


def map_lookup_batch(fd: int, key_size: int, value_size: int, max_entries: int):
    """All (key, value) byte pairs of a map, a few syscalls instead of one per
    element. For arrays that is every index."""
    keys = ctypes.create_string_buffer(key_size * max_entries)
    values = ctypes.create_string_buffer(value_size * max_entries)
    cursor = ctypes.create_string_buffer(max(key_size, 8))
    out: list[tuple[bytes, bytes]] = []
    first = True
    while True:
        attr = _attr(
            "=QQQQIIQQ",
            0 if first else _addr(cursor), _addr(cursor),
            _addr(keys), _addr(values),
            max_entries, fd, 0, 0,
        )
        done = False
        try:
            bpf(BPF_MAP_LOOKUP_BATCH, attr)
        except FileNotFoundError:
            done = True  # the kernel still reports what it copied
        count = struct.unpack_from("=I", attr, 32)[0]
        kraw, vraw = keys.raw, values.raw  # each .raw is a fresh copy: take it once
        for i in range(count):
            out.append((
                kraw[i * key_size:(i + 1) * key_size],
                vraw[i * value_size:(i + 1) * value_size],
            ))
        if done or count == 0:
            return out
        first = False


def array_values(fd: int, value_size: int, max_entries: int) -> bytes:
    """Every value of an array map, in index order, as one buffer: one
    syscall, and no per-element objects (the port set has 131,072)."""
    keys = ctypes.create_string_buffer(4 * max_entries)
    values = ctypes.create_string_buffer(value_size * max_entries)
    cursor = ctypes.create_string_buffer(8)
    attr = _attr("=QQQQIIQQ", 0, _addr(cursor), _addr(keys), _addr(values), max_entries, fd, 0, 0)
    with contextlib.suppress(FileNotFoundError):  # the end reached: all copied
        bpf(BPF_MAP_LOOKUP_BATCH, attr)
    count = struct.unpack_from("=I", attr, 32)[0]
    if count != max_entries:
        raise OSError(errno.EIO, f"batch lookup copied {count} of {max_entries} elements")
    return values.raw


# --- BPF_PROG_TEST_RUN --------------------------------------------------------

@dataclass(frozen=True)
class TestRun:
    retval: int
    data_out: bytes


# pytest would otherwise try to collect the dataclass above as a test class
TestRun.__test__ = False  # type: ignore[attr-defined]


def prog_test_run(
    prog_fd: int,
    data: bytes,
    *,
    repeat: int = 1,
    ctx: bytes | None = None,
    flags: int = 0,
    batch_size: int = 0,
    out_size: int | None = None,
) -> TestRun:
    """Run PROG_FD on DATA in the kernel. CTX is a struct xdp_md for XDP."""
    data_in = ctypes.create_string_buffer(data, len(data))
    size_out = len(data) + 256 if out_size is None else out_size
    data_out = ctypes.create_string_buffer(size_out) if size_out else None
    ctx_in = ctypes.create_string_buffer(ctx, len(ctx)) if ctx else None
    attr = _attr(
        "=IIIIQQIIIIQQIII",
        prog_fd, 0, len(data), size_out,
        _addr(data_in), _addr(data_out),
        repeat, 0,
        len(ctx) if ctx else 0, 0,
        _addr(ctx_in), 0,
        flags, 0, batch_size,
    )
    bpf(BPF_PROG_TEST_RUN, attr)
    _, retval, _, out_len = struct.unpack_from("=IIII", attr, 0)
    out = data_out.raw[:out_len] if data_out is not None else b""
    return TestRun(retval=retval, data_out=out)


@functools.cache
def possible_cpus() -> int:
    """Per-CPU map values have one slot per *possible* CPU, not online."""
    with open("/sys/devices/system/cpu/possible") as f:
        spec = f.read().strip()
    count = 0
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


# --- maps made here, program attachment to maps (the TCP frame relay) ---------

BPF_MAP_CREATE = 0
BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_DETACH = 9

BPF_PROG_TYPE_SK_SKB = 14
BPF_MAP_TYPE_SOCKHASH = 18

BPF_SK_SKB_STREAM_PARSER = 4
BPF_SK_SKB_STREAM_VERDICT = 5


def map_create(map_type: int, key_size: int, value_size: int, max_entries: int,
               name: str = "") -> int:
    """A new map; returns its fd, which the caller must close."""
    attr = _attr("=IIIIIII", map_type, key_size, value_size, max_entries, 0, 0, 0)
    struct.pack_into("15s", attr, 28, os.fsencode(name)[:15])  # map_name, NUL-padded
    return bpf(BPF_MAP_CREATE, attr)


def prog_attach(target_fd: int, prog_fd: int, attach_type: int) -> None:
    bpf(BPF_PROG_ATTACH, _attr("=IIII", target_fd, prog_fd, attach_type, 0))


def prog_detach(target_fd: int, prog_fd: int, attach_type: int) -> None:
    bpf(BPF_PROG_DETACH, _attr("=IIII", target_fd, prog_fd, attach_type, 0))


def map_keys(fd: int, key_size: int) -> list[bytes]:
    """Every key of a map, by BPF_MAP_GET_NEXT_KEY (for maps, such as
    sockhashes, that have no batch lookup)."""
    keys: list[bytes] = []
    cur = None
    nxt = ctypes.create_string_buffer(key_size)
    while True:
        k = ctypes.create_string_buffer(cur, key_size) if cur is not None else None
        try:
            bpf(BPF_MAP_GET_NEXT_KEY, _attr("=IIQQ", fd, 0, _addr(k), _addr(nxt)))
        except FileNotFoundError:
            return keys
        cur = nxt.raw
        keys.append(cur)


# --- does the kernel have a helper? ---------------------------------------------

_PROBE_LOG_SIZE = 4096
# The verifier's words for a helper it does not have: "invalid func
# unknown#N" past the last helper it knows, "unknown func NAME#N" for one
# it knows but not for this program type.
_UNKNOWN_HELPER = (b"invalid func ", b"unknown func ")


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("=BBhi", code, (src << 4) | dst, off, imm)


def load_raw(prog_type: int, insns: bytes, log=None, prog_flags: int = 0) -> int:
    """Load a program of PROG_TYPE given as raw instructions (a probe's, a
    floor's: nothing compiled), with PROG_FLAGS; returns its fd. LOG, a
    buffer, gets the verifier's log."""
    code = ctypes.create_string_buffer(insns, len(insns))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = _attr("=IIQQIIQII", prog_type, len(insns) // 8, _addr(code), _addr(license_),
                 1 if log is not None else 0, len(log) if log is not None else 0, _addr(log),
                 0, prog_flags)
    return bpf(BPF_PROG_LOAD, attr)


XDP_DROP_PROGRAM = _insn(0xB7, dst=0, imm=1) + _insn(0x95)  # r0 = XDP_DROP; exit
XDP_PASS_PROGRAM = _insn(0xB7, dst=0, imm=2) + _insn(0x95)  # r0 = XDP_PASS; exit


def live_frames_refused() -> int:
    """0 when XDP test runs take BPF_F_TEST_XDP_LIVE_FRAMES (Linux 5.18),
    else the errno they are refused with: EINVAL where the kernel has no
    such flag, EPERM where it has them and refuses them (a locked-down
    kernel: one such host's lockdown was "integrity"). Runs of a program
    that drops, so nothing is sent either way. A kernel that accepts a flag
    no kernel defines reads no flag at all (5.10's XDP test runs ignore
    them): the live-frames flag would be ignored too."""
    fd = load_raw(BPF_PROG_TYPE_XDP, XDP_DROP_PROGRAM)
    try:
        if _test_run_refused(fd, _NO_SUCH_TEST_FLAG) != errno.EINVAL:
            return errno.EINVAL
        return _test_run_refused(fd, BPF_F_TEST_XDP_LIVE_FRAMES)
    finally:
        os.close(fd)


_NO_SUCH_TEST_FLAG = 1 << 31


def _test_run_refused(fd: int, flags: int) -> int:
    """0, or the errno a test run with FLAGS is refused with (EINVAL, EPERM)."""
    try:
        prog_test_run(fd, bytes(64), flags=flags, out_size=0)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EPERM):
            return exc.errno
        raise
    return 0


def has_helper(prog_type: int, helper: int) -> bool:
    """Whether the verifier lets a program of PROG_TYPE call HELPER (its
    number in uapi/linux/bpf.h), as libbpf's feature probes decide: load a
    program that calls it with a ctx, an offset, an 8-byte stack buffer and
    its length (bpf_xdp_load_bytes' and bpf_skb_load_bytes' arguments), and
    read the verifier log when the load fails. No compiler, a few microseconds."""
    insns = b"".join((
        _insn(0xBF, dst=3, src=10),          # r3 = r10 (frame pointer)
        _insn(0x07, dst=3, imm=-8),          # r3 += -8
        _insn(0xB7, dst=2, imm=0),           # r2 = 0
        _insn(0xB7, dst=4, imm=8),           # r4 = 8
        _insn(0x85, imm=helper),             # call HELPER (r1: the ctx)
        _insn(0xB7, dst=0, imm=2),           # r0 = 2 (XDP_PASS, SK_PASS)
        _insn(0x95),                         # exit
    ))
    log = ctypes.create_string_buffer(_PROBE_LOG_SIZE)
    try:
        os.close(load_raw(prog_type, insns, log))
    except OSError:
        if any(words in log.raw for words in _UNKNOWN_HELPER):
            return False
        raise
    return True
