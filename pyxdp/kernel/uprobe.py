# SPDX-License-Identifier: Apache-2.0
"""A uprobe placed by file offset, through perf_event_open(2) and the
kernel's uprobe PMU, with a program already loaded (any loader's fd).

Why not a loader's attach by name (bcc's attach_uprobe, libbpf's
func_name): it takes a library path and a symbol name,
and resolves the name itself, opening the library and the files its
.gnu_debuglink and build-id name; a library an ordinary user built names a
FIFO there and root blocks in open(2) (docs/spec.md §11.1). Here the
caller gives the offset (pyxdp.streams.elf_symbols) and a path the kernel
resolves once, in our process: /proc/self/fd/N of a file we opened and
checked, so the probe is on that very inode. The perf event is ours: the
kernel removes the probe when its fd is closed, or when the process ends,
however it ends.
"""

import ctypes
import fcntl
import functools
import os
import platform
import struct

from pyxdp.kernel import clib

PMU = "/sys/bus/event_source/devices/uprobe"
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_EVENT_IOC_ENABLE = 0x2400  # _IO('$', 0)
PERF_EVENT_IOC_SET_BPF = 0x40042408  # _IOW('$', 8, __u32)
# struct perf_event_attr up to config2 (PERF_ATTR_SIZE_VER1): type, size,
# config, sample_period, sample_type, read_format, the flag bits,
# wakeup_events, bp_type, config1 (the path), config2 (the offset).
_ATTR = struct.Struct("=IIQQQQQIIQQ")


@functools.cache
def _perf_event_open():
    libc = clib.open_library("libc.so.6", "libc6")
    return clib.bind(libc, "syscall", ctypes.c_long, ctypes.c_long, ctypes.c_char_p,
                     ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_ulong)


@functools.cache
def pmu() -> tuple[int, int]:
    """The uprobe PMU's perf type and the config bit that makes a return
    probe (from its format/retprobe, "config:N")."""
    with open(f"{PMU}/type") as f:
        kind = int(f.read())
    with open(f"{PMU}/format/retprobe") as f:
        field, _, bit = f.read().strip().partition(":")
    if field != "config" or not bit.isdigit():
        raise OSError(f"{PMU}/format/retprobe says {field}:{bit}, not config:N")
    return kind, 1 << int(bit)


def attach(prog_fd: int, path: str, offset: int, *, retprobe: bool = False,
           pid: int = -1) -> int:
    """A uprobe (or a return probe) at byte OFFSET of the file PATH, running
    the program PROG_FD, in process PID alone or (-1) in every process;
    enabled. Returns the perf event's fd: closing it removes the probe.
    OSError with errno on failure."""
    machine = platform.machine()
    if machine not in _SYS_PERF_EVENT_OPEN:
        raise OSError(f"perf_event_open(2) syscall number unknown for {machine}")
    kind, ret_bit = pmu()
    name = ctypes.create_string_buffer(os.fsencode(path))
    attr = _ATTR.pack(kind, _ATTR.size, ret_bit if retprobe else 0, 0, 0, 0, 0, 0, 0,
                      ctypes.addressof(name), offset)
    # every CPU: pid -1 takes cpu 0, and the program runs wherever it is hit
    fd = _perf_event_open()(_SYS_PERF_EVENT_OPEN[machine], attr, pid, 0 if pid == -1 else -1,
                            -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"perf_event_open: {os.strerror(err)}")
    try:
        fcntl.ioctl(fd, PERF_EVENT_IOC_SET_BPF, prog_fd)
        fcntl.ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd
