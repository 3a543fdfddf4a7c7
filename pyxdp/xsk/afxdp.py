# SPDX-License-Identifier: Apache-2.0
"""An AF_XDP socket bound to one (interface, queue): what receiving
(pyxdp/xsk/socket.py) and transmitting (pyxdp/xsk/tx.py) have in common.

A socket either owns a UMEM (anonymous memory cut into chunks, registered
with it, with the fill and completion rings that move chunks between us
and the kernel), or shares the UMEM of a socket already bound to the same
(interface, queue) with XDP_SHARED_UMEM: then it has no fill or completion
ring of its own, the owner's serve both, and a chunk one socket received
can be sent by the other by descriptor, without a copy. Each socket has an
RX ring, a TX ring, or both.

Bind mode: an owner asks for zero-copy first and falls back to copy mode
(or asks for one of them only); a sharer takes the owner's. The mode in
effect is read back with getsockopt(XDP_OPTIONS), never assumed. veth has
no zero-copy support, so on veth it is always copy mode. Every bind asks
for need_wakeup (XDP_USE_NEED_WAKEUP): the kernel then says in each ring's
flags when it needs a syscall to make progress.
"""

import ctypes
import errno
import mmap
import os
import socket
import struct
import time
from dataclasses import asdict, dataclass

import numpy as np

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import ethtool, xdp_features
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.signals import ClosedOnExit
from pyxdp.xsk import sizing
from pyxdp.xsk.rings import (
    MMAP_OFFSETS_SIZE,
    CompletionRing,
    FillRing,
    RxRing,
    TxRing,
    mmap_offsets,
)

AF_XDP = 44
SOL_XDP = 283
XDP_MMAP_OFFSETS = 1
XDP_RX_RING = 2
XDP_TX_RING = 3
XDP_UMEM_REG = 4
XDP_UMEM_FILL_RING = 5
XDP_UMEM_COMPLETION_RING = 6
XDP_STATISTICS = 7
XDP_OPTIONS = 8
XDP_OPTIONS_ZEROCOPY = 1

XDP_SHARED_UMEM = 1 << 0
XDP_COPY = 1 << 1
XDP_ZEROCOPY = 1 << 2
XDP_USE_NEED_WAKEUP = 1 << 3
XDP_USE_SG = 1 << 4  # a packet longer than a chunk comes in several (Linux 6.6)

XDP_PGOFF_RX_RING = 0
XDP_PGOFF_TX_RING = 0x80000000
XDP_UMEM_PGOFF_FILL_RING = 0x100000000
XDP_UMEM_PGOFF_COMPLETION_RING = 0x180000000

CHUNK_SIZES = (2048, 4096)
SOCKADDR_XDP = struct.Struct("=HHIII")  # family, flags, ifindex, queue_id, shared_umem_fd
UMEM_REG = struct.Struct("=QQIIII")  # addr, len, chunk_size, headroom, flags, tx_metadata_len
STATISTICS = struct.Struct("=6Q")

BIND_MODES = ("auto", "zerocopy", "copy")
BUSY_RETRY_S = 1.0
# What bind() says when a driver cannot do zero-copy.
_NO_ZEROCOPY = (errno.EOPNOTSUPP, errno.EINVAL, errno.EPROTONOSUPPORT)

_libc = ctypes.CDLL(None, use_errno=True)


def _bind(fd: int, addr: bytes) -> None:
    """bind(2) through libc: Python's socket.bind() does not know AF_XDP."""
    if _libc.bind(fd, addr, len(addr)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def check_size(name: str, value: int) -> None:
    """A number of chunks or ring entries: a power of two in range."""
    wrong = sizing.problem(value)
    if wrong:
        raise ZerolayerError(f"{name} {wrong}")


@dataclass(frozen=True)
class XskStatistics:
    """getsockopt(XDP_STATISTICS), the kernel's names. In copy mode a frame
    lost to an empty fill ring counts in rx_fill_ring_empty_descs *and* in
    rx_dropped (the kernel drops it); rx_dropped also counts frames too big
    for a chunk. Lost frames are rx_dropped + rx_ring_full. On the sending
    side, tx_invalid_descs counts descriptors the kernel refused (outside
    the UMEM, across a chunk's end, empty), which it consumes without
    sending or completing; tx_ring_empty_descs counts the times the kernel
    looked for more to send and found the TX ring empty (on 6.18 copy mode,
    about once per kick that sent all it was given), not a loss."""

    rx_dropped: int = 0
    rx_invalid_descs: int = 0
    tx_invalid_descs: int = 0
    rx_ring_full: int = 0
    rx_fill_ring_empty_descs: int = 0
    tx_ring_empty_descs: int = 0

    @property
    def lost(self) -> int:
        return self.rx_dropped + self.rx_ring_full

    def lost_by_reason(self, mode: str) -> dict[str, int | None]:
        """The lost frames by why (docs/spec.md §5.7): the RX ring was full
        (the reader fell behind), no UMEM chunk was free (the reader held
        them all), or a frame was longer than a chunk. In zero-copy mode the
        driver drops a frame it has no chunk for before the socket sees it:
        the socket cannot count those (None), the NIC's statistics do."""
        if mode == "copy":
            return {"rx_ring_full": self.rx_ring_full,
                    "no_free_chunk": self.rx_fill_ring_empty_descs,
                    "too_long": self.rx_dropped - self.rx_fill_ring_empty_descs}
        return {"rx_ring_full": self.rx_ring_full, "no_free_chunk": None,
                "too_long": self.rx_dropped}

    def to_json(self) -> dict:
        return asdict(self)


class Umem:
    """FRAMES chunks of CHUNK_SIZE bytes of anonymous memory, and, once
    registered with the socket that owns them, that socket's fill and
    completion rings (None when it was given none to map)."""

    def __init__(self, frames: int, chunk_size: int):
        self.frames: int = frames
        self.chunk_size: int = chunk_size
        self._mmap = mmap.mmap(-1, frames * chunk_size,
                               mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
        self.array = np.frombuffer(self._mmap, np.uint8)
        self.view = memoryview(self._mmap)
        self.chunk_mask = np.uint64(~(chunk_size - 1) & 0xFFFFFFFFFFFFFFFF)
        self.fill: FillRing | None = None
        self.completion: CompletionRing | None = None
        self.owner_fd: int | None = None

    def register(self, sock: socket.socket, fill_size: int, completion_size: int) -> None:
        """Register with SOCK (before its rings are mapped and it is bound)."""
        sock.setsockopt(SOL_XDP, XDP_UMEM_REG, UMEM_REG.pack(
            self.array.ctypes.data, len(self._mmap), self.chunk_size, 0, 0, 0))
        sock.setsockopt(SOL_XDP, XDP_UMEM_FILL_RING, fill_size)
        sock.setsockopt(SOL_XDP, XDP_UMEM_COMPLETION_RING, completion_size)
        self.owner_fd = sock.fileno()

    def map_rings(self, offsets: dict, fill_size: int, completion_size: int) -> None:
        """Map the rings given a size above 1 (a ring of 1 is one the
        kernel insists on and this side never uses)."""
        assert self.owner_fd is not None
        if fill_size > 1:
            self.fill = FillRing(self.owner_fd, XDP_UMEM_PGOFF_FILL_RING, offsets["fill"],
                                 fill_size)
        if completion_size > 1:
            self.completion = CompletionRing(self.owner_fd, XDP_UMEM_PGOFF_COMPLETION_RING,
                                             offsets["comp"], completion_size)

    def close_rings(self) -> None:
        """Unmap the rings (a ring mapping holds the owner socket open)."""
        for ring in (self.fill, self.completion):
            if ring is not None:
                ring.close()
        self.fill = self.completion = None


class AfXdpSocket(ClosedOnExit):
    """An AF_XDP socket bound to IFNAME's queue QUEUE (inside NETNS), with an
    RX ring of RX_SIZE entries and a TX ring of TX_SIZE (0: none).

    It owns a UMEM of FRAMES chunks of CHUNK_SIZE bytes with a fill ring of
    FILL_SIZE and a completion ring of COMPLETION_SIZE entries, bound in
    mode BIND ("auto": zero-copy, else copy; "zerocopy" or fail; "copy");
    or, with SHARE_UMEM_OF, it uses that socket's UMEM and rings, and its
    mode (XDP_SHARED_UMEM: same interface and queue only)."""

    # What close() looks at, set before anything can fail.
    rx: RxRing | None = None
    tx: TxRing | None = None
    _sock: socket.socket | None = None
    _owns_umem = True

    def __init__(self, ifname: str, queue: int = 0, *, netns: str | None = None,
                 frames: int = 4096, chunk_size: int = CHUNK_SIZES[0], rx_size: int = 0,
                 tx_size: int = 0, fill_size: int = 1, completion_size: int = 1,
                 bind: str = "auto", share_umem_of: "AfXdpSocket | None" = None,
                 multi_buffer: bool = False):
        self.ifname, self.queue, self.netns = ifname, queue, netns
        # Bound with XDP_USE_SG: packets longer than a chunk arrive in pieces.
        self.multi_buffer = multi_buffer
        if share_umem_of is not None:
            frames, chunk_size = share_umem_of.frames, share_umem_of.chunk_size
        self.frames: int = frames
        self.chunk_size: int = chunk_size
        self.mode: str | None = None
        self.mode_note: str | None = None
        self._owns_umem = share_umem_of is None
        try:
            self._open(frames, chunk_size, rx_size, tx_size, fill_size, completion_size, bind,
                       share_umem_of)
        except BaseException:
            AfXdpSocket.close(self)
            raise

    def _open(self, frames, chunk_size, rx_size, tx_size, fill_size, completion_size, bind,
              share_umem_of) -> None:
        with netns_mod.entered(self.netns):
            self.ifindex = socket.if_nametoindex(self.ifname)
            try:
                self._sock = socket.socket(AF_XDP, socket.SOCK_RAW, 0)
            except OSError as exc:
                raise ZerolayerError(
                    f"cannot create an AF_XDP socket ({exc.strerror}): the kernel needs "
                    "CONFIG_XDP_SOCKETS"
                ) from None
        s = self._sock
        try:
            if share_umem_of is None:
                self.memory = Umem(frames, chunk_size)
                self.memory.register(s, fill_size, completion_size)
            else:
                self.memory = self._shared_umem(share_umem_of)
            if rx_size:
                s.setsockopt(SOL_XDP, XDP_RX_RING, rx_size)
            if tx_size:
                s.setsockopt(SOL_XDP, XDP_TX_RING, tx_size)
            offsets = mmap_offsets(s.getsockopt(SOL_XDP, XDP_MMAP_OFFSETS, MMAP_OFFSETS_SIZE))
            if share_umem_of is None:
                self.memory.map_rings(offsets, fill_size, completion_size)
            if rx_size:
                self.rx = RxRing(s.fileno(), XDP_PGOFF_RX_RING, offsets["rx"], rx_size)
            if tx_size:
                self.tx = TxRing(s.fileno(), XDP_PGOFF_TX_RING, offsets["tx"], tx_size)
        except OSError as exc:
            raise ZerolayerError(
                f"cannot set up {self.memory_bytes >> 20} MiB for an AF_XDP socket on queue "
                f"{self.queue} of {self.ifname} ({frames} UMEM chunks of {chunk_size} bytes, "
                f"rings of {max(rx_size, tx_size)}): {exc.strerror}; ask for fewer"
            ) from None
        if share_umem_of is None:
            self._bind_mode(bind)
        else:
            self._bind_shared(share_umem_of)
        opts = struct.unpack("=I", s.getsockopt(SOL_XDP, XDP_OPTIONS, 4))[0]
        self.mode = "zerocopy" if opts & XDP_OPTIONS_ZEROCOPY else "copy"

    def _shared_umem(self, owner: "AfXdpSocket") -> Umem:
        if owner.closed:
            raise ZerolayerError("the socket whose UMEM was to be shared is closed")
        if (owner.ifname, owner.queue, owner.netns) != (self.ifname, self.queue, self.netns):
            raise ZerolayerError(
                f"a socket shares the UMEM of a socket on its own interface and queue: "
                f"{owner.ifname} queue {owner.queue} is not {self.ifname} queue {self.queue}")
        return owner.memory

    @property
    def memory_bytes(self) -> int:
        """The UMEM this socket maps (none when it shares another's);
        subclasses add their rings."""
        return self.frames * self.chunk_size if self._owns_umem else 0

    # --- binding ----------------------------------------------------------------------

    def _bind_mode(self, bind: str) -> None:
        tries = {"auto": [XDP_ZEROCOPY, XDP_COPY], "zerocopy": [XDP_ZEROCOPY],
                 "copy": [XDP_COPY]}[bind]
        for i, flag in enumerate(tries):
            try:
                self._bind_queue(flag | XDP_USE_NEED_WAKEUP | (XDP_USE_SG * self.multi_buffer))
                return
            except OSError as exc:
                if flag == XDP_ZEROCOPY and exc.errno in _NO_ZEROCOPY and i + 1 < len(tries):
                    self.mode_note = f"{self._zerocopy_refusal(exc)}: copy mode instead"
                    continue
                raise ZerolayerError(self._bind_error(exc, flag)) from None

    def _bind_shared(self, owner: "AfXdpSocket") -> None:
        """Bind next to OWNER with XDP_SHARED_UMEM, which takes no mode flag:
        the owner's mode and need_wakeup are the pool's, shared."""
        try:
            self._bind_queue(XDP_SHARED_UMEM, owner.fileno())
        except OSError as exc:
            raise ZerolayerError(f"sharing the UMEM of the socket on queue {self.queue} of "
                                 f"{self.ifname} failed: {exc.strerror}") from None
        self.mode_note = owner.mode_note

    def _bind_queue(self, flags: int, shared_fd: int = 0) -> None:
        """bind(2), retrying EBUSY for a moment: the kernel frees a closed
        socket's hold on its queue in a deferred work item, so a socket
        closed (or a listener killed) just before may still hold it."""
        addr = SOCKADDR_XDP.pack(AF_XDP, flags, self.ifindex, self.queue, shared_fd)
        deadline = time.monotonic() + BUSY_RETRY_S
        while True:
            try:
                return _bind(self._socket.fileno(), addr)
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                    raise
            time.sleep(0.01)

    def _bind_error(self, exc: OSError, flag: int) -> str:
        where = f"queue {self.queue} of {self.ifname}"
        if exc.errno == errno.EBUSY:
            return (f"{where} already has an AF_XDP socket bound (another `zerolayer listen`"
                    " or `emit`? see `ss --xdp`)")
        if flag == XDP_ZEROCOPY and exc.errno in _NO_ZEROCOPY:
            return f"{self._zerocopy_refusal(exc)}: use copy mode"
        hint = f" (does it have a queue {self.queue}? see `ethtool -l {self.ifname}`)" \
            if exc.errno == errno.EINVAL else ""
        return f"binding an AF_XDP socket to {where} failed: {exc.strerror}{hint}"

    def _zerocopy_refusal(self, exc: OSError) -> str:
        """Why the driver would not bind zero-copy, in its own words where the
        kernel has them: its XDP features (6.3+) say whether it offers
        AF_XDP zero-copy at all; else only bind's errno is known."""
        with netns_mod.entered(self.netns):
            driver = ethtool.driver_name(self.ifname) or "its driver"
        features = xdp_features.read(self.ifindex, self.netns)
        if features is not None and not features.xsk_zerocopy:
            return (f"{self.ifname} ({driver}) does not offer AF_XDP zero-copy on this kernel "
                    "(its XDP features lack xsk-zerocopy)")
        pieces = " with XDP_USE_SG (for frames longer than a chunk)" if self.multi_buffer else ""
        return (f"{self.ifname} ({driver}) refused a zero-copy bind of queue {self.queue}"
                f"{pieces} ({exc.strerror})")

    # --- use --------------------------------------------------------------------------

    @property
    def _socket(self) -> socket.socket:
        if self._sock is None:
            raise ZerolayerError(f"the AF_XDP socket on {self.ifname} queue {self.queue} is closed")
        return self._sock

    def fileno(self) -> int:
        return self._socket.fileno()

    @property
    def umem(self) -> np.ndarray:
        """The whole UMEM as bytes."""
        return self.memory.array

    @property
    def umem_view(self) -> memoryview:
        return self.memory.view

    def frame(self, addr: int, length: int) -> memoryview:
        """The bytes of one frame, in place in UMEM."""
        return self.memory.view[addr:addr + length]

    def statistics(self) -> XskStatistics:
        raw = self._socket.getsockopt(SOL_XDP, XDP_STATISTICS, STATISTICS.size)
        raw = raw.ljust(STATISTICS.size, b"\0")  # older kernels fill fewer fields
        return XskStatistics(*STATISTICS.unpack(raw))

    # --- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Unmap the rings, then close the socket. Idempotent. A sharer
        leaves the UMEM and its rings to the owner."""
        for ring in (self.rx, self.tx):  # a ring mapping keeps the socket alive
            if ring is not None:
                ring.close()
        self.rx = self.tx = None
        memory = self.__dict__.get("memory")
        if memory is not None and self._owns_umem:
            memory.close_rings()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        # UMEM stays mapped while a caller (or a sharer) still holds a view
        # of it; this object lets go of its own.
        self.__dict__.pop("memory", None)

    @property
    def closed(self) -> bool:
        return self._sock is None
