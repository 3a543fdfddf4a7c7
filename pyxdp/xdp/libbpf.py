# SPDX-License-Identifier: Apache-2.0
"""The few libbpf calls that load a clang-built BPF object, through ctypes.

libbpf1 is already installed with libxdp1 (which links it). An object is
opened from bytes zerolayer read itself (pyxdp.xdp.objects checked the
file), so libbpf never opens a path. Maps are either reused (an fd given,
or a pin path that exists) or made, and pinned at their pin path, before
any program of the object loads.
libbpf writes its diagnostics and the verifier's log to fd 2; the caller
points fd 2 at a log file while it loads (pyxdp.xdp.compiler).
"""

import ctypes
import errno
import functools
import os

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys, clib

LIBBPF = "libbpf.so.1"

_P = ctypes.c_void_p


class _Lib:
    def __init__(self) -> None:
        lib = clib.open_library(LIBBPF, "libbpf1")

        def bind(name, restype, *argtypes):
            return clib.bind(lib, name, restype, *argtypes)

        self.open_mem = bind("bpf_object__open_mem", _P, ctypes.c_char_p, ctypes.c_size_t, _P)
        self.find_map = bind("bpf_object__find_map_by_name", _P, _P, ctypes.c_char_p)
        self.find_program = bind("bpf_object__find_program_by_name", _P, _P, ctypes.c_char_p)
        self.next_program = bind("bpf_object__next_program", _P, _P, _P)
        self.load = bind("bpf_object__load", ctypes.c_int, _P)
        self.close = bind("bpf_object__close", None, _P)
        self.reuse_fd = bind("bpf_map__reuse_fd", ctypes.c_int, _P, ctypes.c_int)
        self.set_pin_path = bind("bpf_map__set_pin_path", ctypes.c_int, _P, ctypes.c_char_p)
        self.map_fd = bind("bpf_map__fd", ctypes.c_int, _P)
        self.program_fd = bind("bpf_program__fd", ctypes.c_int, _P)
        self.set_autoload = bind("bpf_program__set_autoload", ctypes.c_int, _P, ctypes.c_bool)
        self.set_initial_value = bind("bpf_map__set_initial_value", ctypes.c_int, _P,
                                      ctypes.c_char_p, ctypes.c_size_t)
        self.set_max_entries = bind("bpf_map__set_max_entries", ctypes.c_int, _P, ctypes.c_uint32)
        self.program_name = bind("bpf_program__name", ctypes.c_char_p, _P)
        self.section_name = bind("bpf_program__section_name", ctypes.c_char_p, _P)
        self.attach = bind("bpf_program__attach", _P, _P)
        self.link_destroy = bind("bpf_link__destroy", ctypes.c_int, _P)


@functools.cache
def lib() -> _Lib:
    return _Lib()


def _check(rc: int, what: str) -> None:
    if rc < 0:
        raise OSError(-rc, f"{what}: {os.strerror(-rc)}")


class BpfObject:
    """An opened (then loaded) BPF object. close() frees what libbpf holds;
    fds the caller took with dup() stay its own."""

    def __init__(self, image: bytes, name: str):
        self._image = ctypes.create_string_buffer(image, len(image))  # libbpf keeps no copy
        self._obj = lib().open_mem(self._image, len(image), None)
        if not self._obj:
            err = ctypes.get_errno() or errno.EINVAL
            raise ZerolayerError(f"libbpf cannot open the BPF object {name}: {os.strerror(err)}")
        self.name = name

    @property
    def handle(self):
        """The struct bpf_object pointer, for libxdp (pyxdp.xdp.dispatcher)."""
        return self._obj

    def _map(self, name: str):
        found = lib().find_map(self._obj, name.encode())
        if not found:
            raise ZerolayerError(f"the BPF object {self.name} has no map {name}")
        return found

    def reuse_map(self, name: str, fd: int) -> None:
        """Use the map FD as the object's map NAME (libbpf dups it)."""
        _check(lib().reuse_fd(self._map(name), fd), f"reusing the map {name}")

    def pin_map(self, name: str, path: str) -> None:
        """Reuse the map pinned at PATH, or make it and pin it there."""
        _check(lib().set_pin_path(self._map(name), path.encode()), f"pin path of {name}")

    def set_rodata(self, value: bytes) -> None:
        """The object's read-only data (its `const volatile` globals), all of
        it: frozen once loaded, so the verifier takes it as constants."""
        rc = lib().set_initial_value(self._map(".rodata"), value, len(value))
        _check(rc, f"the read-only data of {self.name} ({len(value)} bytes)")

    def set_max_entries(self, name: str, entries: int) -> None:
        """Map NAME's size, before load (its C definition's otherwise)."""
        _check(lib().set_max_entries(self._map(name), entries), f"the size of {name}")

    def programs(self) -> dict[str, str]:
        """Every program's section (its kind, and where libbpf attaches it),
        by its name."""
        found = {}
        prog = lib().next_program(self._obj, None)
        while prog:
            found[lib().program_name(prog).decode()] = lib().section_name(prog).decode()
            prog = lib().next_program(self._obj, prog)
        return found

    def attach(self, name: str) -> "Link":
        """Program NAME attached where its section says (a tracepoint's,
        a raw tracepoint's): OSError when the kernel refuses."""
        prog = lib().find_program(self._obj, name.encode())
        if not prog:
            raise ZerolayerError(f"the BPF object {self.name} has no program {name}")
        link = lib().attach(prog)
        if not link:
            err = ctypes.get_errno() or errno.EINVAL
            raise OSError(err, f"attaching {name}: {os.strerror(err)}")
        return Link(link)

    def load(self, programs: bool = True, only: tuple[str, ...] | None = None) -> None:
        """Make (or reuse) the maps and load every program (none, unless
        PROGRAMS; those named in ONLY, when given): raises OSError."""
        bpfsys.lift_memlock()  # libbpf would only where it finds no memcg accounting
        if not programs or only is not None:
            prog = lib().next_program(self._obj, None)
            while prog:
                if not programs or lib().program_name(prog).decode() not in (only or ()):
                    _check(lib().set_autoload(prog, False), "leaving a program unloaded")
                prog = lib().next_program(self._obj, prog)
        _check(lib().load(self._obj), f"loading {self.name}")

    def map_fd(self, name: str) -> int:
        """A dup of map NAME's fd, the caller's to close."""
        return os.dup(lib().map_fd(self._map(name)))

    def program_fd(self, name: str) -> int:
        """A dup of program NAME's fd, the caller's to close."""
        prog = lib().find_program(self._obj, name.encode())
        if not prog:
            raise ZerolayerError(f"the BPF object {self.name} has no program {name}")
        return os.dup(lib().program_fd(prog))

    def close(self) -> None:
        if self._obj:
            lib().close(self._obj)
            self._obj = None


class Link:
    """A program's attachment, held by libbpf: destroy() detaches it (and
    the process's end does, however it ends)."""

    def __init__(self, handle):
        self._handle = handle

    def destroy(self) -> None:
        if self._handle:
            lib().link_destroy(self._handle)
            self._handle = None
