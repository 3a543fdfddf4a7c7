# SPDX-License-Identifier: Apache-2.0
"""libxdp's multi-program dispatcher, through ctypes: read who runs in it,
join it (or have libxdp make it), leave it.

xdp-tools, Suricata, bpfman and everything else loaded through libxdp share
an interface through one dispatcher program, which calls up to ten
programs in priority order; each one's verdict says whether the next one
runs. zerolayer's program joins it as one of them (a freplace program built
from the object pyxdp.xdp.objects makes), passing on what is not its own.
libxdp keeps the dispatcher's state pinned under /sys/fs/bpf/xdp and
serialises its users with a lock there, so zerolayer and xdp-loader may
change one interface at the same time.

Where the kernel refuses freplace programs (some locked-down kernels do:
libxdp's test load fails with EPERM) libxdp falls back to attaching a
program alone, as xdp-loader does there; `attach` reports that, since other
libxdp programs then cannot join.

libxdp works on the calling thread's network namespace: every call enters
the interface's (pyxdp.kernel.netns.entered). libxdp and libbpf write what
they have to say to fd 2: callers point it at a log (compiler.stderr_to).
"""

import ctypes
import errno
import functools
import os
from dataclasses import dataclass

from pyxdp.kernel import bpfsys, clib
from pyxdp.kernel import netns as netns_mod
from pyxdp.xdp import libbpf

LIBXDP = "libxdp.so.1"
# enum xdp_attach_mode
MODES = {"native": 1, "skb": 2}
MODE_NAMES = {v: k for k, v in MODES.items()}
DISPATCHER_NAME = "xdp_dispatcher"  # the dispatcher's program name (libxdp)
# zerolayer's place in it unless told (lower runs first): after xdp-filter,
# whose programs ask for 10, so a firewall still sees everything first, and
# before programs at libxdp's default of 50, since zerolayer takes only its
# own datagrams and passes the rest on.
DEFAULT_PRIORITY = 20
MAX_PRIORITY = 2**31 - 1  # libxdp takes an unsigned int

_P = ctypes.c_void_p


class _Lib:
    def __init__(self) -> None:
        lib = clib.open_library(LIBXDP, "libxdp1")

        def bind(name, restype, *argtypes):
            return clib.bind(lib, name, restype, *argtypes)

        self.get_error = bind("libxdp_get_error", ctypes.c_long, _P)
        self.from_bpf_obj = bind("xdp_program__from_bpf_obj", _P, _P, ctypes.c_char_p)
        self.from_id = bind("xdp_program__from_id", _P, ctypes.c_uint32)
        self.close = bind("xdp_program__close", None, _P)
        self.name = bind("xdp_program__name", ctypes.c_char_p, _P)
        self.id = bind("xdp_program__id", ctypes.c_uint32, _P)
        self.fd = bind("xdp_program__fd", ctypes.c_int, _P)
        self.run_prio = bind("xdp_program__run_prio", ctypes.c_uint, _P)
        self.set_run_prio = bind("xdp_program__set_run_prio", ctypes.c_int, _P, ctypes.c_uint)
        self.set_frags = bind("xdp_program__set_xdp_frags_support", ctypes.c_int, _P,
                              ctypes.c_bool)
        self.attach = bind("xdp_program__attach", ctypes.c_int, _P, ctypes.c_int, ctypes.c_int,
                           ctypes.c_uint)
        self.detach = bind("xdp_program__detach", ctypes.c_int, _P, ctypes.c_int, ctypes.c_int,
                           ctypes.c_uint)
        self.mp_get = bind("xdp_multiprog__get_from_ifindex", _P, ctypes.c_int)
        self.mp_next = bind("xdp_multiprog__next_prog", _P, _P, _P)
        self.mp_is_legacy = bind("xdp_multiprog__is_legacy", ctypes.c_bool, _P)
        self.mp_mode = bind("xdp_multiprog__attach_mode", ctypes.c_int, _P)
        self.mp_close = bind("xdp_multiprog__close", None, _P)


@functools.cache
def lib() -> _Lib:
    return _Lib()


def _failed(ptr) -> int:
    """The errno of a libxdp pointer result (0: a good pointer)."""
    if not ptr:
        return ctypes.get_errno() or errno.EINVAL
    return -lib().get_error(ptr)


@dataclass(frozen=True)
class Member:
    """A program in a dispatcher."""

    name: str
    id: int
    priority: int


@dataclass(frozen=True)
class Dispatcher:
    mode: str | None
    members: list[Member]  # in the order they run


def read(ifindex: int, netns: str | None) -> Dispatcher | None:
    """libxdp's dispatcher on IFINDEX and its programs; None when the
    interface runs no dispatcher (no program, or one alone)."""
    with netns_mod.entered(netns):
        mp = lib().mp_get(ifindex)
        if _failed(mp):
            return None
        try:
            if lib().mp_is_legacy(mp):
                return None
            members = []
            prog = lib().mp_next(None, mp)
            while prog:
                members.append(Member((lib().name(prog) or b"").decode(errors="replace"),
                                      lib().id(prog), lib().run_prio(prog)))
                prog = lib().mp_next(prog, mp)
            return Dispatcher(MODE_NAMES.get(lib().mp_mode(mp)), members)
        finally:
            lib().mp_close(mp)


def attach(obj: libbpf.BpfObject, ifindex: int, mode: str, priority: int,
           netns: str | None, frags: bool) -> int:
    """Put OBJ's XDP program on IFINDEX through libxdp at PRIORITY: into the
    dispatcher there, or one libxdp makes; alone where the kernel cannot
    run one. FRAGS: the program takes packets in several buffers (its
    section is xdp.frags). Returns an fd of the program attached, the
    caller's to close; raises OSError as libxdp failed."""
    bpfsys.lift_memlock()  # libxdp loads a dispatcher
    # No section named: the object's one program, in "xdp" or "xdp.frags".
    prog = lib().from_bpf_obj(obj.handle, None)
    err = _failed(prog)
    if err:
        raise OSError(err, f"libxdp cannot take the program: {os.strerror(err)}")
    try:
        rc = lib().set_run_prio(prog, priority)
        if rc < 0:
            raise OSError(-rc, f"priority {priority}: {os.strerror(-rc)}")
        # libxdp reads frags support from the program's flags, which libbpf
        # sets from the section name only when it loads it: said here, a
        # dispatcher libxdp makes for it takes multi-buffer packets too.
        rc = lib().set_frags(prog, frags)
        if rc < 0:
            raise OSError(-rc, f"multi-buffer support: {os.strerror(-rc)}")
        with netns_mod.entered(netns):
            rc = lib().attach(prog, ifindex, MODES[mode], 0)
        if rc < 0:
            raise OSError(-rc, os.strerror(-rc))
        return os.dup(lib().fd(prog))
    finally:
        lib().close(prog)


def detach(prog_id: int, ifindex: int, mode: str, netns: str | None) -> None:
    """Take program PROG_ID out of IFINDEX's dispatcher (libxdp removes the
    dispatcher with its last program). Raises OSError as libxdp failed."""
    bpfsys.lift_memlock()  # libxdp loads the dispatcher without it
    prog = lib().from_id(prog_id)
    err = _failed(prog)
    if err:
        raise OSError(err, f"program {prog_id}: {os.strerror(err)}")
    try:
        with netns_mod.entered(netns):
            rc = lib().detach(prog, ifindex, MODES[mode], 0)
        if rc < 0:
            raise OSError(-rc, os.strerror(-rc))
    finally:
        lib().close(prog)
