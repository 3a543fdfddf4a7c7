"""AF_XDP sockets for Python: frames from zerolayer's XDP program, in batches.

    with XskSocket("dut0", queue=0, netns="lab-dut") as xsk:
        batch = xsk.recv(timeout=1.0)
        with batch:                       # release() recycles the chunks
            for i in range(len(batch)):
                print(batch.source(i), bytes(batch.payload(i)))

In an asyncio program, `async for batch in xsk.batches():` reads the same
batches without a thread (pyxdp/xsk/aio.py).

A socket owns a UMEM (anonymous memory cut into chunks), a fill ring, an RX
ring and the completion ring the kernel insists on, is bound to one
(interface, rx queue) with XDP_USE_NEED_WAKEUP, and registers itself in the
XSKMAP pinned by `zerolayer attach` at key = queue, which is where the XDP
program redirects that queue's valid token datagrams. close() (or leaving
the `with` block, including on Ctrl-C or SIGTERM) deletes the entry before
closing the socket, so valid datagrams fall back to the kernel at once; if
the process dies first, the kernel itself removes a dead socket from the map.

Bind mode: zero-copy is asked for first and copy mode is the fallback; the
mode in effect is read back with getsockopt(XDP_OPTIONS), never assumed.
veth has no zero-copy support, so on veth it is always copy mode.

Why batches, and why numpy plus libxdp. A per-frame Python loop over the
rings pays the interpreter per frame, where `socket.recv_into` does not
(docs/spec.md section 8.1), so Python must touch each *batch*, not each
frame, and per-frame work must be the caller's choice. Of the candidates:
  - numpy alone can view rings and UMEM, but cannot order memory: on arm64
    reading a ring's producer index with a plain load lets the CPU read the
    descriptors before it, and a plain store of our index can become visible
    before our reads of the entries are done;
  - a C helper built at install would save the ctypes calls, but turns a
    pure-Python package into one that needs a compiler and Python headers
    on every target for about thirty lines of C;
  - libxdp (libxdp1, already a dependency of xdp-tools) exports its ring
    helpers for language bindings since 1.2. Four ctypes calls per batch
    (peek/release on RX, reserve/submit on the fill ring) carry the
    acquire/release ordering; numpy does the rest, a batch at a time.
So a receive is: peek (load-acquire of the RX producer), copy the batch's
descriptors with numpy, release (store-release of the RX consumer, after
those reads), hand the caller numpy/memoryview views of the UMEM chunks.
Batch.release() reserves fill slots (load-acquire of the fill consumer, so
no slot the kernel is still reading is overwritten), writes the chunk
addresses into them with numpy, then submits (store-release of the fill
producer, after those writes and after the caller's reads of the chunks).
x86-64 needs only that the compiler keep the order, which a call into a
shared library guarantees; arm64 gets LDAR/STLR from libxdp's __atomic
builtins. Measured by pyxdp.bench.xsk_vs_udp.
"""

import ctypes
import errno
import mmap
import os
import select
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass

import numpy as np

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.signals import ClosedOnExit
from pyxdp.proto.ethernet import PARSED_L2_OVERHEAD
from pyxdp.xdp import ownership
from pyxdp.xdp.maps import SPECS, BpfMap
from pyxdp.xsk import aio, sizing
from pyxdp.xsk.batch import Batch
from pyxdp.xsk.rings import MMAP_OFFSETS_SIZE, FillRing, RxRing, mmap_offsets

AF_XDP = 44
SOL_XDP = 283
XDP_MMAP_OFFSETS = 1
XDP_RX_RING = 2
XDP_UMEM_REG = 4
XDP_UMEM_FILL_RING = 5
XDP_UMEM_COMPLETION_RING = 6
XDP_STATISTICS = 7
XDP_OPTIONS = 8
XDP_OPTIONS_ZEROCOPY = 1

XDP_COPY = 1 << 1
XDP_ZEROCOPY = 1 << 2
XDP_USE_NEED_WAKEUP = 1 << 3

XDP_PGOFF_RX_RING = 0
XDP_UMEM_PGOFF_FILL_RING = 0x100000000

XDP_PACKET_HEADROOM = 256  # the kernel keeps this much of each chunk in front
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


@dataclass(frozen=True)
class XskStatistics:
    """getsockopt(XDP_STATISTICS), the kernel's names. In copy mode a frame
    lost to an empty fill ring counts in rx_fill_ring_empty_descs *and* in
    rx_dropped (the kernel drops it); rx_dropped also counts frames too big
    for a chunk. Lost frames are rx_dropped + rx_ring_full."""

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


def _chunk_size_for(mtu: int) -> int:
    """The smaller chunk when a full-MTU frame (two VLAN tags included) fits."""
    small = CHUNK_SIZES[0]
    return small if mtu + PARSED_L2_OVERHEAD <= small - XDP_PACKET_HEADROOM else CHUNK_SIZES[1]


def _check_size(name: str, value: int) -> None:
    wrong = sizing.problem(value)
    if wrong:
        raise ZerolayerError(f"{name} {wrong}")


class XskSocket(ClosedOnExit):
    """An AF_XDP socket on IFNAME's rx queue QUEUE (inside NETNS), registered
    with the zerolayer program attached there.

    frames: UMEM chunks, all of them in the fill ring to start with (a power
    of two); chunk_size: 2048 or 4096 (default: 2048 when the interface's
    MTU fits in it); rx_size: RX ring entries; bind: "auto" (zero-copy,
    else copy), "zerocopy" (or fail) or "copy".
    """

    def __init__(self, ifname: str, queue: int = 0, *, netns: str | None = None,
                 frames: int = 4096, chunk_size: int | None = None, rx_size: int = 2048,
                 bind: str = "auto"):
        if bind not in BIND_MODES:
            raise ZerolayerError(f"unknown bind mode {bind!r}: use one of {', '.join(BIND_MODES)}")
        _check_size("frames", frames)
        _check_size("rx_size", rx_size)
        if chunk_size not in (None, *CHUNK_SIZES):
            raise ZerolayerError(f"chunk size must be 2048 or 4096, not {chunk_size}")
        self.ifname, self.queue, self.netns = ifname, queue, netns
        self.frames, self.rx_size = frames, rx_size
        self.mode: str | None = None
        self.mode_note: str | None = None
        self._sock: socket.socket | None = None
        self._xsks: BpfMap | None = None
        self._registered = False
        self._rings: list = []
        self._close_hooks: list[Callable[[], None]] = []
        try:
            ins = self._check_attached(ifname, netns, queue)
            self.mtu = ins.state.mtu
            self.chunk_size = chunk_size or _chunk_size_for(self.mtu)
            # The largest frame a chunk holds; the kernel drops bigger ones (rx_dropped).
            self.max_frame_len = self.chunk_size - XDP_PACKET_HEADROOM
            self._open(frames, rx_size, bind)
            self._register(ins.pin_dir)
        except BaseException:
            self.close()
            raise

    # --- setup --------------------------------------------------------------------

    @staticmethod
    def _check_attached(ifname, netns, queue) -> ownership.Inspection:
        ins = ownership.require_ours(ifname, netns)
        queues = ins.state.rx_queues
        if not 0 <= queue < queues:
            raise ZerolayerError(
                f"{ifname} has {queues} rx queue{'s' if queues > 1 else ''} "
                f"(0-{queues - 1}): there is no queue {queue}"
            )
        return ins

    def _open(self, frames: int, rx_size: int, bind: str) -> None:
        with netns_mod.entered(self.netns):
            self.ifindex = socket.if_nametoindex(self.ifname)
            try:
                s = socket.socket(AF_XDP, socket.SOCK_RAW, 0)
            except OSError as exc:
                raise ZerolayerError(
                    f"cannot create an AF_XDP socket ({exc.strerror}): the kernel needs "
                    "CONFIG_XDP_SOCKETS"
                ) from None
        self._sock = s
        fd = s.fileno()
        try:
            self._map_memory(s, frames, rx_size)
        except OSError as exc:
            raise ZerolayerError(
                f"cannot set up {self.memory_bytes >> 20} MiB for an AF_XDP socket on queue "
                f"{self.queue} of {self.ifname} ({frames} UMEM chunks of {self.chunk_size} bytes, "
                f"an RX ring of {rx_size}): {exc.strerror}; ask for fewer"
            ) from None
        self._bind_mode(bind)
        opts = struct.unpack("=I", s.getsockopt(SOL_XDP, XDP_OPTIONS, 4))[0]
        self.mode = "zerocopy" if opts & XDP_OPTIONS_ZEROCOPY else "copy"
        self._chunk_mask = np.uint64(~(self.chunk_size - 1) & 0xFFFFFFFFFFFFFFFF)
        self._fill.put(np.arange(frames, dtype=np.uint64) * np.uint64(self.chunk_size))
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    def _map_memory(self, s: socket.socket, frames: int, rx_size: int) -> None:
        """UMEM, registered with the socket, and the fill and RX rings."""
        self._umem = mmap.mmap(-1, frames * self.chunk_size,
                               mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
        self.umem = np.frombuffer(self._umem, np.uint8)
        self.umem_view = memoryview(self._umem)
        s.setsockopt(SOL_XDP, XDP_UMEM_REG, UMEM_REG.pack(
            self.umem.ctypes.data, len(self._umem), self.chunk_size, 0, 0, 0))
        # At the end of a batch the kernel publishes the RX entries first and
        # only then how far it read the fill ring, so a chunk can be back with
        # us while its old fill slot still looks taken. With two slots per
        # chunk there is always room to give every chunk back.
        fill_size = 2 * frames
        s.setsockopt(SOL_XDP, XDP_UMEM_FILL_RING, fill_size)
        s.setsockopt(SOL_XDP, XDP_UMEM_COMPLETION_RING, 1)  # required; we never transmit
        s.setsockopt(SOL_XDP, XDP_RX_RING, rx_size)
        offsets = mmap_offsets(s.getsockopt(SOL_XDP, XDP_MMAP_OFFSETS, MMAP_OFFSETS_SIZE))
        self._fill = FillRing(s.fileno(), XDP_UMEM_PGOFF_FILL_RING, offsets["fill"], fill_size)
        self._rings.append(self._fill)
        self._rx = RxRing(s.fileno(), XDP_PGOFF_RX_RING, offsets["rx"], rx_size)
        self._rings.append(self._rx)

    def _bind_mode(self, bind: str) -> None:
        tries = {"auto": [XDP_ZEROCOPY, XDP_COPY], "zerocopy": [XDP_ZEROCOPY],
                 "copy": [XDP_COPY]}[bind]
        for i, flag in enumerate(tries):
            try:
                self._bind_queue(flag | XDP_USE_NEED_WAKEUP)
                return
            except OSError as exc:
                if flag == XDP_ZEROCOPY and exc.errno in _NO_ZEROCOPY and i + 1 < len(tries):
                    self.mode_note = (f"the driver of {self.ifname} refused a zero-copy bind "
                                      f"({exc.strerror})")
                    continue
                raise ZerolayerError(self._bind_error(exc, flag)) from None

    def _bind_queue(self, flags: int) -> None:
        """bind(2), retrying EBUSY for a moment: the kernel frees a closed
        socket's hold on its queue in a deferred work item, so a socket
        closed (or a listener killed) just before may still hold it."""
        addr = SOCKADDR_XDP.pack(AF_XDP, flags, self.ifindex, self.queue, 0)
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
            return (f"{where} already has an AF_XDP socket bound (another `zerolayer listen`?"
                    " see `ss --xdp`)")
        if flag == XDP_ZEROCOPY and exc.errno in _NO_ZEROCOPY:
            return (f"the driver of {self.ifname} cannot bind queue {self.queue} in zero-copy "
                    f"mode ({exc.strerror}): use copy mode")
        return f"binding an AF_XDP socket to {where} failed: {exc.strerror}"

    def _register(self, pin_dir: str) -> None:
        path = os.path.join(pin_dir, "xsks")
        try:
            self._xsks = BpfMap(bpfsys.obj_get(path), "xsks")
        except FileNotFoundError:
            raise ZerolayerError(f"{path} is missing: detach and attach zerolayer again") from None
        self._xsks.check(SPECS["xsks"])
        if self.queue >= self._xsks.info.max_entries:
            raise ZerolayerError(
                f"queue {self.queue} is beyond the {self._xsks.info.max_entries} AF_XDP slots "
                "of zerolayer's socket map"
            )
        # BPF_ANY: whatever a dead listener left at this key is replaced.
        self._xsks.update(self.queue, struct.pack("=I", self._socket.fileno()))
        self._registered = True

    @property
    def xsks_map_id(self) -> int | None:
        """The id of the program's socket map this socket is registered in."""
        return self._xsks.info.id if self._xsks is not None else None

    # --- receiving ------------------------------------------------------------------

    @property
    def _socket(self) -> socket.socket:
        if self._sock is None:
            raise ZerolayerError(f"the AF_XDP socket on {self.ifname} queue {self.queue} is closed")
        return self._sock

    def fileno(self) -> int:
        return self._socket.fileno()

    def recv(self, max_frames: int = 256, timeout: float | None = 0.0) -> Batch:
        """Up to MAX_FRAMES received frames, waiting up to TIMEOUT seconds
        (None: forever) when there are none. The batch may be empty."""
        addr, length = self._rx.take(max_frames)
        # poll() is also the kick a zero-copy driver may wait for (need_wakeup).
        if not len(addr) and (timeout != 0 or self._fill.needs_wakeup):
            if self.wait(timeout):
                addr, length = self._rx.take(max_frames)
        return Batch(self, addr, length)

    def batches(self, max_frames: int = 256) -> AsyncIterator[Batch]:
        """`async for batch in xsk.batches():` in an asyncio program. The
        iterator releases each batch when the next is asked for; see
        pyxdp/xsk/aio.py."""
        return aio.batches(self, max_frames)

    def wait(self, timeout: float | None) -> bool:
        """Block until frames are ready (True) or TIMEOUT seconds pass."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        return bool(self._poll.poll(ms))

    def recycle(self, addr: np.ndarray) -> None:
        """Give the chunks at ADDR (descriptor addresses) back to the kernel.
        The fill ring has two slots per chunk, so they always fit."""
        if len(addr) and not self.closed:
            self._fill.put(addr & self._chunk_mask)

    def frame(self, addr: int, length: int) -> memoryview:
        """The bytes of one received frame, in place in UMEM."""
        return self.umem_view[addr:addr + length]

    def statistics(self) -> XskStatistics:
        raw = self._socket.getsockopt(SOL_XDP, XDP_STATISTICS, STATISTICS.size)
        raw = raw.ljust(STATISTICS.size, b"\0")  # older kernels fill fewer fields
        return XskStatistics(*STATISTICS.unpack(raw))

    def notes(self) -> list[str]:
        """What a user should know before trusting what this socket gets."""
        out = [f"{self.mode} mode: {self.mode_note}"] if self.mode_note else []
        if self.mtu + PARSED_L2_OVERHEAD > self.max_frame_len:
            out.append(
                f"{self.ifname}'s MTU {self.mtu} allows frames longer than the "
                f"{self.max_frame_len} bytes an AF_XDP chunk holds: the kernel drops those "
                "(counted as rx_dropped)"
            )
        return out

    @property
    def memory_bytes(self) -> int:
        """What this socket maps: UMEM and its rings."""
        return sizing.memory_bytes(self.frames, self.chunk_size, self.rx_size)

    def describe(self) -> dict:
        return {"interface": self.ifname, "netns": self.netns, "queue": self.queue,
                "mode": self.mode, "note": self.mode_note, "chunk_size": self.chunk_size,
                "max_frame_len": self.max_frame_len}

    # --- lifetime -------------------------------------------------------------------

    def before_close(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Have close() call HOOK first, while the fd is still open (an event
        loop must drop the fd from its selector before it is closed).
        Returns a function that forgets HOOK."""
        self._close_hooks.append(hook)

        def forget() -> None:
            if hook in self._close_hooks:
                self._close_hooks.remove(hook)
        return forget

    def unregister(self) -> None:
        """Take the socket out of the program's map: from now on the queue's
        valid datagrams fall back to the kernel, and what the RX ring holds
        is all this socket will get. Idempotent."""
        if self._registered and self._xsks is not None:
            self._xsks.delete(self.queue)
            self._registered = False

    def close(self) -> None:
        """Unregister, then close: the entry goes first, so the program never
        redirects to a closing socket. Idempotent."""
        hooks, self._close_hooks = self._close_hooks, []
        for hook in hooks:
            hook()
        self.unregister()
        if self._xsks is not None:
            self._xsks.close()
            self._xsks = None
        for ring in self._rings:  # a ring mapping keeps the socket alive
            ring.close()
        self._rings = []
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        # UMEM stays mapped while a caller still holds a view of it; this
        # object lets go of its own (they were never made if _open failed).
        for name in ("_umem", "umem_view", "umem"):
            self.__dict__.pop(name, None)

    @property
    def closed(self) -> bool:
        return self._sock is None
