# SPDX-License-Identifier: Apache-2.0
"""AF_XDP sockets for Python: frames from zerolayer's XDP program, in batches.

    with XskSocket("dut0", queue=0, netns="lab-dut") as xsk:
        batch = xsk.recv(timeout=1.0)
        with batch:                       # release() recycles the chunks
            for i in range(len(batch)):
                print(batch.source(i), bytes(batch.payload(i)))

In an asyncio program, `async for batch in xsk.batches():` reads the same
batches without a thread (pyxdp/xsk/aio.py).

A socket owns a UMEM (anonymous memory cut into chunks), a fill ring, an RX
ring and a completion ring (of one entry, which the kernel insists on,
unless a transmit socket is to share the UMEM: pyxdp/xsk/tx.py), is bound
to one (interface, rx queue) with XDP_USE_NEED_WAKEUP (pyxdp/xsk/afxdp.py
does what receiving and sending share), and registers itself in the XSKMAP
pinned by `zerolayer attach` at key = queue, which is where the XDP
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
builtins. Measured by pyxdp.bench.delivery.xsk_vs_udp.

Busy polling (busy_poll=BusyPoll(...), pyxdp/xsk/busy_poll.py): the kernel
busy-polls an AF_XDP socket's NAPI context only from the socket's own
non-blocking recvmsg/sendmsg, never from poll() unless the host-wide
net.core.busy_poll is set. So with busy polling in effect, recv() kicks
(a non-blocking recvfrom, one NAPI pass) when the RX ring is empty, and a
wait kicks and looks again for up to the socket's busy-poll time before it
sleeps in poll(), as the kernel's own busy loop does for ordinary sockets.
"""

import os
import select
import socket
import struct
from collections.abc import AsyncIterator, Callable

import numpy as np

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys, ethtool, release
from pyxdp.kernel import netns as netns_mod
from pyxdp.proto.ethernet import PARSED_L2_OVERHEAD
from pyxdp.xdp import ownership
from pyxdp.xdp.maps import SPECS, BpfMap
from pyxdp.xsk import aio, joined, sizing
from pyxdp.xsk import busy_poll as busy_poll_mod
from pyxdp.xsk.afxdp import BIND_MODES, CHUNK_SIZES, AfXdpSocket, check_size
from pyxdp.xsk.batch import Batch
from pyxdp.xsk.busy_poll import BusyPoll, BusyPollState

XDP_PACKET_HEADROOM = 256  # the kernel keeps this much of each chunk in front
_NO_DESC, _NO_LEN = np.empty(0, np.uint64), np.empty(0, np.uint32)


def _chunk_size_for(mtu: int) -> int:
    """The smaller chunk when a full-MTU frame (two VLAN tags included) fits."""
    small = CHUNK_SIZES[0]
    return small if mtu + PARSED_L2_OVERHEAD <= small - XDP_PACKET_HEADROOM else CHUNK_SIZES[1]


class XskSocket(AfXdpSocket):
    """An AF_XDP socket on IFNAME's rx queue QUEUE (inside NETNS), registered
    with the zerolayer program attached there.

    frames: UMEM chunks, all of them in the fill ring to start with (a power
    of two); chunk_size: 2048 or 4096 (default: 2048 when the interface's
    MTU fits in it); rx_size: RX ring entries; bind: "auto" (zero-copy,
    else copy), "zerocopy" (or fail) or "copy"; completion_size: 1 unless a
    transmit socket will share this UMEM (pyxdp.xsk.tx.XskTxSocket),
    whose sent chunks come back here (a power of two, at least its TX ring).
    busy_poll: preferred busy polling to ask for (None: none); what holds
    is self.busy_poll, describe() and notes() say it.
    """

    busy_poll: BusyPollState | None = None

    def __init__(self, ifname: str, queue: int = 0, *, netns: str | None = None,
                 frames: int = 4096, chunk_size: int | None = None, rx_size: int = 2048,
                 bind: str = "auto", completion_size: int = 1,
                 busy_poll: BusyPoll | None = None):
        if bind not in BIND_MODES:
            raise ZerolayerError(f"unknown bind mode {bind!r}: use one of {', '.join(BIND_MODES)}")
        check_size("frames", frames)
        check_size("rx_size", rx_size)
        if completion_size != 1:
            check_size("completion_size", completion_size)
        if chunk_size not in (None, *CHUNK_SIZES):
            raise ZerolayerError(f"chunk size must be 2048 or 4096, not {chunk_size}")
        self.rx_size = rx_size
        self._xsks: BpfMap | None = None
        self._registered = False
        self._close_hooks: list[Callable[[], None]] = []
        self._napi_id = 0
        self._napi_unknown = False  # look again for a NAPI id after the first frame
        try:
            ins = self._check_attached(ifname, netns, queue)
            self.mtu = ins.state.mtu
            chunk = chunk_size or _chunk_size_for(self.mtu)
            # The largest frame a chunk holds. Where the MTU allows more, the
            # socket takes a packet in several chunks (XDP_USE_SG, Linux 6.6)
            # unless it shares its UMEM to send: it then takes one chunk a
            # packet, and the XDP program passes longer ones to the kernel.
            self.max_frame_len = chunk - XDP_PACKET_HEADROOM
            multi_buffer = (self.mtu + PARSED_L2_OVERHEAD > self.max_frame_len
                            and completion_size == 1 and release.at_least(6, 6))
            self._pending = (_NO_DESC, _NO_LEN, _NO_LEN)
            # At the end of a batch the kernel publishes the RX entries first and
            # only then how far it read the fill ring, so a chunk can be back with
            # us while its old fill slot still looks taken. With two slots per
            # chunk there is always room to give every chunk back.
            super().__init__(ifname, queue, netns=netns, frames=frames, chunk_size=chunk,
                             rx_size=rx_size, fill_size=2 * frames,
                             completion_size=completion_size, bind=bind,
                             multi_buffer=multi_buffer)
            fill, rx = self.memory.fill, self.rx
            assert fill is not None and rx is not None  # asked for above
            self._fill, self._rx, self._chunk_mask = fill, rx, self.memory.chunk_mask
            self._fill.put(np.arange(frames, dtype=np.uint64) * np.uint64(self.chunk_size),
                           self._chunk_mask)
            self._poll = select.poll()
            self._poll.register(self.fileno(), select.POLLIN)
            self._kick_buffer = bytearray(1)
            if busy_poll is not None:
                self._start_busy_polling(busy_poll)
            # A zero-copy driver fills its RX queue from the fill ring only
            # when kicked: virtio_net found it empty at bind, and until this
            # poll() it would take no frame, holding back the sender.
            if self._fill.needs_wakeup:
                self.wait(0)
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
        # Whether the program may send this socket a packet in pieces, said
        # before the socket is there to get one.
        self._set_takes_pieces(pin_dir, self.multi_buffer)
        # BPF_ANY: whatever a dead listener left at this key is replaced.
        self._xsks.update(self.queue, struct.pack("=I", self._socket.fileno()))
        self._registered = True

    def _set_takes_pieces(self, pin_dir: str, value: bool) -> None:
        path = os.path.join(pin_dir, "xsks_sg")
        try:
            sg = BpfMap(bpfsys.obj_get(path), "xsks_sg")
        except FileNotFoundError:
            raise ZerolayerError(f"{path} is missing: detach and attach zerolayer again") from None
        try:
            sg.check(SPECS["xsks_sg"])
            sg.update(self.queue, bytes([value]))
        finally:
            sg.close()

    def _start_busy_polling(self, wanted: BusyPoll) -> None:
        """After bind: from 6.13 that is when the kernel ties the socket to
        its queue's NAPI context, if the driver links one."""
        self.busy_poll = busy_poll_mod.apply(self._socket, wanted)
        self._napi_id = busy_poll_mod.napi_id(self._socket)
        # Before 6.13 the kernel takes the NAPI id from the first frame received.
        self._napi_unknown = bool(self.busy_poll.usec) and not self._napi_id

    @property
    def busy_polling(self) -> bool:
        """Whether the kernel busy-polls this socket: busy polling is set
        and the socket is tied to a NAPI context."""
        return self.busy_poll is not None and self.busy_poll.usec > 0 and self._napi_id != 0

    def kick(self) -> None:
        """A non-blocking recvfrom: with busy polling, one pass of the
        socket's NAPI context (and, in zero-copy mode without it, the
        driver's wakeup). What it brought is in the RX ring."""
        try:
            self._socket.recv_into(self._kick_buffer, 1, socket.MSG_DONTWAIT)
        except OSError:
            # An interface down or gone, or a wakeup the driver refused: the
            # RX ring says what arrived, and the listener notices a lost
            # interface; the kick has nothing to add.
            pass

    @property
    def xsks_map_id(self) -> int | None:
        """The id of the program's socket map this socket is registered in."""
        return self._xsks.info.id if self._xsks is not None else None

    # --- receiving ------------------------------------------------------------------

    def recv(self, max_frames: int = 256, timeout: float | None = 0.0) -> Batch:
        """Up to MAX_FRAMES received frames, waiting up to TIMEOUT seconds
        (None: forever) when there are none. The batch may be empty."""
        addr, length, options = self._take(max_frames)
        if not len(addr) and self.busy_polling:
            self.kick()  # one NAPI pass, as a non-blocking read of any socket makes
            addr, length, options = self._take(max_frames)
        # poll() is also the kick a zero-copy driver may wait for (need_wakeup).
        if not len(addr) and (timeout != 0 or self._fill.needs_wakeup):
            if self.wait(timeout):
                addr, length, options = self._take(max_frames)
        if self._napi_unknown and len(addr):
            self._napi_unknown = False
            self._napi_id = busy_poll_mod.napi_id(self._socket)
        if options is not None and joined.has_pieces(options):
            pieces = joined.Joined(self, addr, length, options)
            return Batch(pieces, pieces.addr, pieces.length)
        return Batch(self, addr, length)

    def _take(self, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Up to LIMIT descriptors, with their options when the socket takes
        a packet in pieces; the pieces of a packet not ended yet wait for
        the next take."""
        if not self.multi_buffer:
            return (*self._rx.take(limit), None)
        fresh = self._rx.take_pieces(limit)
        if len(self._pending[0]):
            fresh = (np.concatenate((self._pending[0], fresh[0])),
                     np.concatenate((self._pending[1], fresh[1])),
                     np.concatenate((self._pending[2], fresh[2])))
        whole, self._pending = joined.split_partial(*fresh)
        return whole

    def batches(self, max_frames: int = 256) -> AsyncIterator[Batch]:
        """`async for batch in xsk.batches():` in an asyncio program. The
        iterator releases each batch when the next is asked for; see
        pyxdp/xsk/aio.py."""
        return aio.batches(self, max_frames)

    def wait(self, timeout: float | None) -> bool:
        """Block until frames are ready (True) or TIMEOUT seconds pass.
        Busy polling: kick and look for up to its time first, then sleep."""
        if timeout != 0 and self.busy_polling:
            spun = self.busy_poll_s if timeout is None else min(self.busy_poll_s, timeout)
            if busy_poll_mod.spin([self.kick], self.ready, spun):
                return True
            timeout = None if timeout is None else timeout - spun
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        return bool(self._poll.poll(ms))

    def ready(self) -> bool:
        """Whether the RX ring holds frames now (poll() without waiting)."""
        return bool(self._poll.poll(0))

    @property
    def busy_poll_s(self) -> float:
        """How long a wait busy-polls before it sleeps: 0 without busy polling."""
        if self.busy_poll is None or not self.busy_polling:
            return 0.0
        return self.busy_poll.usec / 1e6

    def recycle(self, addr: np.ndarray) -> None:
        """Give the chunks at ADDR (descriptor addresses) back to the kernel.
        The fill ring has two slots per chunk, so they always fit."""
        if len(addr) and not self.closed:
            self._fill.put(addr, self._chunk_mask)

    def notes(self) -> list[str]:
        """What a user should know before trusting what this socket gets."""
        out = [f"{self.mode} mode: {self.mode_note}"] if self.mode_note else []
        if self.mtu + PARSED_L2_OVERHEAD > self.max_frame_len and not self.multi_buffer:
            why = ("it shares its UMEM to send" if release.at_least(6, 6)
                   else "this kernel cannot bind AF_XDP with XDP_USE_SG (Linux 6.6)")
            out.append(
                f"{self.ifname}'s MTU {self.mtu} allows frames longer than the "
                f"{self.max_frame_len} bytes an AF_XDP chunk holds, and this socket takes one "
                f"chunk a packet ({why}): the kernel drops such frames (counted as rx_dropped), "
                "but zerolayer's program passes to the kernel the token datagrams that reach it "
                "in several buffers (multi_buffer_passed)"
            )
        if self.busy_poll is not None:
            refusal = self.busy_poll.refusal()
            if refusal:
                out.append(refusal)
            if self.busy_poll.usec and not self._napi_id:
                out.append(self._no_napi_note())
        return out

    def _no_napi_note(self) -> str:
        with netns_mod.entered(self.netns):
            driver = ethtool.driver_name(self.ifname) or "its driver"
        where = f"{self.ifname} ({driver}) queue {self.queue}"
        if release.at_least(6, 13):
            never = " (veth never does)" if driver == "veth" else ""
            return (f"busy polling cannot happen on {where}: the socket has no NAPI id, the "
                    f"driver links no NAPI context to the queue{never}")
        return (f"busy polling does not happen on {where} until the socket has a NAPI id, "
                "from the first frame the driver delivers with one")

    @property
    def memory_bytes(self) -> int:
        """What this socket maps: UMEM and its rings."""
        return sizing.memory_bytes(self.frames, self.chunk_size, self.rx_size)

    def describe(self) -> dict:
        return {"interface": self.ifname, "netns": self.netns, "queue": self.queue,
                "mode": self.mode, "note": self.mode_note, "chunk_size": self.chunk_size,
                "max_frame_len": self.max_frame_len, "multi_buffer": self.multi_buffer,
                "busy_poll": None if self.busy_poll is None else
                {**self.busy_poll.to_json(), "napi_id": self._napi_id or None}}

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
        super().close()
