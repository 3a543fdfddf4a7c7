# SPDX-License-Identifier: Apache-2.0
"""The rings of an AF_XDP socket: memory shared with the kernel, as numpy
views, whose producer and consumer indices move through libxdp.

Each ring is a power-of-two array of entries plus a producer and a consumer
index. The side that writes entries publishes them with a store-release of
its index; the other side reads that index with a load-acquire before it
reads the entries (and stores its own index with release once it has read
them). libxdp exports its inline ring helpers as real symbols "for use
by language bindings" (symbol version LIBXDP_1.2.0); they use
__atomic_load_n(__ATOMIC_ACQUIRE) and __atomic_store_n(__ATOMIC_RELEASE), which compile to plain moves plus a
compiler barrier on x86-64 (TSO) and to LDAR/STLR on arm64. Calling them
through ctypes gives each batch those semantics for four calls, while the
entries themselves are read and written with numpy, ordered by the calls
that bracket them (see pyxdp/xsk/socket.py). That is the pure path; the
compiled core (pyxdp/xsk/_core.c, chosen by pyxdp/xsk/core.py) does the
same on the same struct in one C call per batch, with the same barriers.

The ring structs below are libxdp's `struct xsk_ring_prod/cons` (public ABI:
its inline functions read these fields in the caller's code).
"""

import ctypes
import mmap
import struct
from dataclasses import dataclass

import numpy as np

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import clib
from pyxdp.xsk import core

LIBXDP = "libxdp.so.1"

# struct xdp_ring_offset: where producer, consumer, entries and flags sit in
# a ring's mapping; struct xdp_mmap_offsets has one per ring: rx, tx, fill, comp.
RING_OFFSET = struct.Struct("=QQQQ")
MMAP_OFFSETS_SIZE = 4 * RING_OFFSET.size

XDP_RING_NEED_WAKEUP = 1

# struct xdp_desc {u64 addr; u32 len; u32 options}, seen as four u32s so the
# length column is the same on either byte order.
DESC_WORDS = 4


class _XskRing(ctypes.Structure):
    _fields_ = [
        ("cached_prod", ctypes.c_uint32),
        ("cached_cons", ctypes.c_uint32),
        ("mask", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("producer", ctypes.c_void_p),
        ("consumer", ctypes.c_void_p),
        ("ring", ctypes.c_void_p),
        ("flags", ctypes.c_void_p),
    ]


_RING_P = ctypes.POINTER(_XskRing)
_U32_P = ctypes.POINTER(ctypes.c_uint32)


class _LibXdp:
    """The exported ring helpers of libxdp (>= 1.2) that pyxdp.xsk uses."""

    def __init__(self):
        try:
            lib = ctypes.CDLL(LIBXDP)
            self.cons_peek = clib.bind(lib, "xsk_ring_cons__peek", ctypes.c_uint32,
                                   _RING_P, ctypes.c_uint32, _U32_P)
        except (OSError, AttributeError):
            raise ZerolayerError(
                "libxdp 1.2 or later is needed for AF_XDP rings: install libxdp1 "
                "(vagrant/provision.sh does)"
            ) from None
        self.cons_release = clib.bind(lib, "xsk_ring_cons__release", None, _RING_P, ctypes.c_uint32)
        self.prod_reserve = clib.bind(lib, "xsk_ring_prod__reserve", ctypes.c_uint32,
                                  _RING_P, ctypes.c_uint32, _U32_P)
        self.prod_submit = clib.bind(lib, "xsk_ring_prod__submit", None, _RING_P, ctypes.c_uint32)
        self.prod_needs_wakeup = clib.bind(lib, "xsk_ring_prod__needs_wakeup", ctypes.c_int, _RING_P)
        self.prod_nb_free = clib.bind(lib, "xsk_prod_nb_free", ctypes.c_uint32, _RING_P,
                                  ctypes.c_uint32)


_lib: _LibXdp | None = None


def libxdp() -> _LibXdp:
    global _lib
    if _lib is None:
        _lib = _LibXdp()
    return _lib


@dataclass(frozen=True)
class RingOffsets:
    producer: int
    consumer: int
    desc: int
    flags: int


def mmap_offsets(raw: bytes) -> dict[str, RingOffsets]:
    """Parse getsockopt(XDP_MMAP_OFFSETS)."""
    names = ("rx", "tx", "fill", "comp")
    return {n: RingOffsets(*RING_OFFSET.unpack_from(raw, i * RING_OFFSET.size))
            for i, n in enumerate(names)}


class _Ring:
    """One ring, mapped from the socket at page offset PGOFF."""

    def __init__(self, fd: int, pgoff: int, offsets: RingOffsets, size: int, entry_size: int):
        self.size = size
        self._map = mmap.mmap(fd, offsets.desc + size * entry_size,
                              mmap.MAP_SHARED | mmap.MAP_POPULATE,
                              mmap.PROT_READ | mmap.PROT_WRITE, offset=pgoff)
        base = np.frombuffer(self._map, np.uint8).ctypes.data
        self._ring = _XskRing(0, 0, size - 1, size, base + offsets.producer,
                              base + offsets.consumer, base + offsets.desc, base + offsets.flags)
        self._ref = ctypes.byref(self._ring)
        self._ring_addr = core.ring_address(self._ring)
        self._idx = ctypes.c_uint32()
        self._idx_ref = ctypes.byref(self._idx)
        self._lib = libxdp()
        self._desc_offset = offsets.desc

    def _entries(self, dtype, count: int) -> np.ndarray:
        return np.frombuffer(self._map, dtype, count=count, offset=self._desc_offset)

    def _drop_views(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Unmap. A mapping holds the socket open, so its views go first
        (they are never handed out)."""
        if self._map.closed:
            return
        self._drop_views()
        self._map.close()


class RxRing(_Ring):
    """Descriptors of received frames: the kernel produces, we consume."""

    def __init__(self, fd, pgoff, offsets, size):
        super().__init__(fd, pgoff, offsets, size, DESC_WORDS * 4)
        self._addr = self._entries(np.uint64, size * 2).reshape(size, 2)[:, 0]
        words = self._entries(np.uint32, size * DESC_WORDS).reshape(size, DESC_WORDS)
        self._len, self._options = words[:, 2], words[:, 3]

    def _drop_views(self) -> None:
        self._addr = self._len = self._options = None

    def take(self, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to LIMIT descriptors as (addr, len) copies. They are released
        to the kernel before returning: the copies are all we read."""
        c = core.compiled
        if c is not None:  # one call, where libxdp's through ctypes takes two and two copies
            addr, length = np.empty(limit, np.uint64), np.empty(limit, np.uint32)
            n = c.rx_take(self._ring_addr, limit, addr, length)
            return (addr[:n], length[:n]) if n else (_EMPTY_ADDR, _EMPTY_LEN)
        n = self._lib.cons_peek(self._ref, limit, self._idx_ref)
        if not n:
            return _EMPTY_ADDR, _EMPTY_LEN
        start = self._idx.value & (self.size - 1)
        addr, length = _copy_out(self._addr, start, n), _copy_out(self._len, start, n)
        self._lib.cons_release(self._ref, n)
        return addr, length

    def take_pieces(self, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """take(), with each descriptor's options: a socket bound with
        XDP_USE_SG gets a packet in several descriptors, all but the last
        marked XDP_PKT_CONTD (pyxdp/xsk/joined.py). Through libxdp only:
        jumbo packets cost their copies, not these calls."""
        n = self._lib.cons_peek(self._ref, limit, self._idx_ref)
        if not n:
            return _EMPTY_ADDR, _EMPTY_LEN, _EMPTY_LEN
        start = self._idx.value & (self.size - 1)
        taken = (_copy_out(self._addr, start, n), _copy_out(self._len, start, n),
                 _copy_out(self._options, start, n))
        self._lib.cons_release(self._ref, n)
        return taken


class FillRing(_Ring):
    """UMEM chunks for the kernel to fill: we produce, the kernel consumes."""

    def __init__(self, fd, pgoff, offsets, size):
        super().__init__(fd, pgoff, offsets, size, 8)
        # libxdp keeps cached_cons one ring size ahead of the real consumer.
        self._ring.cached_cons = size
        self._addr = self._entries(np.uint64, size)

    def _drop_views(self) -> None:
        self._addr = None

    def put(self, addrs: np.ndarray, chunk_mask: int | np.integer) -> None:
        """Publish the chunks of ADDRS (descriptor addresses, masked to their
        chunk's start with CHUNK_MASK). pyxdp.xsk sizes the ring so there is
        always room."""
        n = len(addrs)
        c = core.compiled
        if c is not None:
            if c.fill_put(self._ring_addr, _u64(addrs), int(chunk_mask)) < 0:
                raise RuntimeError(f"no room for {n} chunks in the fill ring: chunks were lost")
            return
        if not self._lib.prod_reserve(self._ref, n, self._idx_ref):
            raise RuntimeError(f"no room for {n} chunks in the fill ring: chunks were lost")
        addrs = addrs & np.uint64(chunk_mask)
        start = self._idx.value & (self.size - 1)
        first = min(n, self.size - start)
        self._addr[start:start + first] = addrs[:first]
        self._addr[:n - first] = addrs[first:n]
        self._lib.prod_submit(self._ref, n)

    @property
    def needs_wakeup(self) -> bool:
        return bool(self._lib.prod_needs_wakeup(self._ref))


class TxRing(_Ring):
    """Descriptors of frames to send: we produce, the kernel consumes."""

    def __init__(self, fd, pgoff, offsets, size):
        super().__init__(fd, pgoff, offsets, size, DESC_WORDS * 4)
        self._ring.cached_cons = size  # as the fill ring: one ring size ahead
        words = self._entries(np.uint32, size * DESC_WORDS).reshape(size, DESC_WORDS)
        self._addr = self._entries(np.uint64, size * 2).reshape(size, 2)[:, 0]
        self._len, self._options = words[:, 2], words[:, 3]

    def _drop_views(self) -> None:
        self._addr = self._len = self._options = None

    def room(self, wanted: int) -> int:
        """How many descriptors fit now (at most the ring size). The kernel's
        consumer index is read (acquire) only when the cached one shows
        fewer than WANTED free."""
        return self._lib.prod_nb_free(self._ref, wanted)

    def put(self, addr: np.ndarray, length: np.ndarray) -> int:
        """Publish as many of the descriptors (ADDR, LENGTH) as fit, from
        the first; returns how many."""
        c = core.compiled
        if c is not None:
            return c.tx_put(self._ring_addr, _u64(addr), np.ascontiguousarray(length, np.uint32))
        n = min(len(addr), self.room(len(addr)))
        if not n or not self._lib.prod_reserve(self._ref, n, self._idx_ref):
            return 0
        start = self._idx.value & (self.size - 1)
        first = min(n, self.size - start)
        for column, values in ((self._addr, addr), (self._len, length)):
            column[start:start + first] = values[:first]
            column[:n - first] = values[first:n]
        self._options[start:start + first] = 0
        self._options[:n - first] = 0
        self._lib.prod_submit(self._ref, n)  # store-release, after the writes above
        return n

    @property
    def unsent(self) -> int:
        """Descriptors published that the kernel has not said it took: its
        consumer index may lag what it sent (pyxdp/xsk/tx.py, push)."""
        return self.size - self.room(self.size)

    @property
    def needs_wakeup(self) -> bool:
        return bool(self._lib.prod_needs_wakeup(self._ref))


class CompletionRing(_Ring):
    """Addresses of sent frames whose chunks the kernel is done with: the
    kernel produces, we consume."""

    def __init__(self, fd, pgoff, offsets, size):
        super().__init__(fd, pgoff, offsets, size, 8)
        self._addr = self._entries(np.uint64, size)

    def _drop_views(self) -> None:
        self._addr = None

    def take(self, limit: int) -> np.ndarray:
        """Up to LIMIT completed addresses, copied, and released to the kernel."""
        c = core.compiled
        if c is not None:
            addr = np.empty(limit, np.uint64)
            n = c.comp_take(self._ring_addr, limit, addr)
            return addr[:n] if n else _EMPTY_ADDR
        n = self._lib.cons_peek(self._ref, limit, self._idx_ref)
        if not n:
            return _EMPTY_ADDR
        addr = _copy_out(self._addr, self._idx.value & (self.size - 1), n)
        self._lib.cons_release(self._ref, n)
        return addr


def _copy_out(column: np.ndarray, start: int, n: int) -> np.ndarray:
    """N entries of a ring's COLUMN from START, copied, wrapping at its end."""
    end = start + n
    if end <= len(column):
        return column[start:end].copy()
    return np.concatenate((column[start:], column[:end - len(column)]))


def _u64(addr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(addr, np.uint64)


_EMPTY_ADDR = np.empty(0, np.uint64)
_EMPTY_LEN = np.empty(0, np.uint32)
