# SPDX-License-Identifier: Apache-2.0
"""Sending whole frames on an AF_XDP socket: XskTxSocket.

A transmit socket needs no XDP program on the interface. It owns a UMEM
whose free chunks it keeps (a stack of chunk addresses), or it shares the
UMEM of a receiving XskSocket on the same queue (XDP_SHARED_UMEM), and then
a chunk that socket received is sent by descriptor, without a copy, and
goes back to that socket's fill ring once the kernel completes it.

Sending is four steps, each a batch at a time:
  - take free chunks and write whole frames into them (the caller: see
    pyxdp/xsk/sender.py, which writes payloads and headers with numpy);
  - submit: publish the descriptors (address, length) on the TX ring
    (libxdp's reserve and submit: a store-release after the writes);
  - kick: sendto(MSG_DONTWAIT) when the TX ring's need_wakeup flag asks
    for it. In copy mode (veth, or a driver without zero-copy) that call is
    where the kernel sends (xsk_generic_xmit): it builds an skb per
    descriptor, up to its budget per call (32 descriptors, or what
    XDP_MAX_TX_SKB_BUDGET sets on kernels that have it, 6.17 on; 6.1 and
    6.12 have not), and returns EAGAIN when more are left. So a push kicks
    until a kick ends without EAGAIN (see push()). In zero-copy
    mode the kick only wakes the driver, which sends on its own;
  - reap: the completion ring gives back the chunks the kernel is done
    with (sent, or dropped by the driver after it took them).

What the socket counts (TxTally) is what `zerolayer emit` reports: frames
submitted and completed, the waits for room (the TX ring or the free
chunks were full), the kicks, and the frames the driver took and dropped
(a kick's EBUSY: NET_XMIT_DROP). The kernel's own count of descriptors it
refused is XDP_STATISTICS tx_invalid_descs: those are consumed without
being sent or completed.
"""

import ctypes
import errno
import select
import socket
import struct
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from pyxdp.errors import ZerolayerError
from pyxdp.xsk.afxdp import BIND_MODES, CHUNK_SIZES, SOL_XDP, AfXdpSocket, check_size

XDP_MAX_TX_SKB_BUDGET = 9  # uapi/linux/if_xdp.h, since 6.17
KERNEL_BUDGET = 32  # TX_BATCH_SIZE in net/xdp/xsk.c: copy mode's frames per sendto by default
MSG_DONTWAIT = socket.MSG_DONTWAIT
WAIT_S = 0.001  # how long a full socket waits for completions between kicks

_libc = ctypes.CDLL(None, use_errno=True)
_libc.sendto.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                         ctypes.c_void_p, ctypes.c_uint]
_libc.sendto.restype = ctypes.c_ssize_t


@dataclass
class TxTally:
    """What a transmit socket did, since it was opened."""

    submitted: int = 0  # descriptors published on the TX ring
    completed: int = 0  # chunks the kernel gave back (sent, or taken and dropped by the driver)
    ring_full: int = 0  # times a batch found no room (TX ring or free chunks) and waited
    kicks: int = 0  # sendto() calls
    driver_dropped: int = 0  # frames the driver took and dropped (a kick's EBUSY)
    kick_errors: dict[str, int] = field(default_factory=dict)  # any other errno, by name

    def to_json(self) -> dict:
        return asdict(self)


def chunk_size_for(frame_len: int) -> int:
    """The smaller chunk that holds a frame of FRAME_LEN bytes (a transmit
    socket writes frames at a chunk's start: no headroom)."""
    for size in CHUNK_SIZES:
        if frame_len <= size:
            return size
    raise ZerolayerError(f"a {frame_len}-byte frame is longer than the largest AF_XDP chunk "
                         f"({CHUNK_SIZES[-1]} bytes)")


class XskTxSocket(AfXdpSocket):
    """A transmit socket on IFNAME's queue QUEUE (inside NETNS): a UMEM of
    FRAMES chunks of CHUNK_SIZE bytes, a TX ring of TX_SIZE entries,
    bound in mode BIND. BUDGET: frames the kernel sends per kick in copy
    mode, KERNEL_BUDGET to TX_SIZE, where the kernel lets it be set (None:
    TX_SIZE); `budget` says what is in effect.

    With SHARE_UMEM_OF, a receiving XskSocket (pyxdp.xsk.socket) on the
    same interface and queue, opened with a completion ring of at least
    TX_SIZE, it has no UMEM of its own (FRAMES, CHUNK_SIZE and BIND are
    that socket's): submit() takes descriptors of chunks it received, and
    their completions go back to its fill ring."""

    def __init__(self, ifname: str, queue: int = 0, *, netns: str | None = None,
                 frames: int = 4096, chunk_size: int = CHUNK_SIZES[0], tx_size: int = 2048,
                 bind: str = "auto", budget: int | None = None, share_umem_of=None):
        if bind not in BIND_MODES:
            raise ZerolayerError(f"unknown bind mode {bind!r}: use one of {', '.join(BIND_MODES)}")
        check_size("tx_size", tx_size)
        self.tally = TxTally()
        self._owner = share_umem_of
        if share_umem_of is None:
            check_size("frames", frames)
            if chunk_size not in CHUNK_SIZES:
                raise ZerolayerError(f"chunk size must be 2048 or 4096, not {chunk_size}")
            # Every chunk can be in flight at once: the completion ring holds them all.
            super().__init__(ifname, queue, netns=netns, frames=frames, chunk_size=chunk_size,
                             tx_size=tx_size, fill_size=1, completion_size=frames, bind=bind)
            self._free = np.arange(frames, dtype=np.uint64) * np.uint64(chunk_size)
            self._nfree = frames
        else:
            completion = share_umem_of.memory.completion
            if completion is None or completion.size < tx_size:
                raise ZerolayerError(
                    f"a transmit socket with a TX ring of {tx_size} needs the receiving "
                    f"socket's completion ring to hold as many: open it with "
                    f"completion_size={tx_size} or more")
            super().__init__(ifname, queue, netns=netns, tx_size=tx_size,
                             share_umem_of=share_umem_of)
            self._free = np.empty(0, np.uint64)
            self._nfree = 0
        self.tx_size = tx_size
        ring, completion = self.tx, self.memory.completion
        assert ring is not None and completion is not None  # asked for above
        self._ring, self._completion = ring, completion
        self._chunk_mask = self.memory.chunk_mask
        self.budget = self._set_budget(budget)
        self._poll = select.poll()
        self._poll.register(self.fileno(), select.POLLOUT)

    def _set_budget(self, wanted: int | None) -> int:
        """Ask the kernel to send up to WANTED frames per kick (copy mode);
        a kernel without XDP_MAX_TX_SKB_BUDGET keeps KERNEL_BUDGET."""
        wanted = self.tx_size if wanted is None else wanted
        if not KERNEL_BUDGET <= wanted <= self.tx_size:
            raise ZerolayerError(f"the TX budget must be {KERNEL_BUDGET} to the TX ring's "
                                 f"{self.tx_size}, not {wanted}")
        try:
            self._socket.setsockopt(SOL_XDP, XDP_MAX_TX_SKB_BUDGET, struct.pack("=I", wanted))
        except OSError as exc:
            if exc.errno in (errno.ENOPROTOOPT, errno.EINVAL):
                return KERNEL_BUDGET  # before 6.17: the kernel's fixed batch
            raise ZerolayerError(f"setting the TX budget of {self.ifname} failed: "
                                 f"{exc.strerror}") from None
        return wanted

    # --- chunks ---------------------------------------------------------------------

    def chunks(self, n: int) -> np.ndarray:
        """Up to N free chunk addresses (fewer when fewer are free, after
        reaping), now the caller's: submit them, or give them back."""
        if self._nfree < n:
            self.reap()
        k = min(n, self._nfree)
        self._nfree -= k
        return self._free[self._nfree:self._nfree + k].copy()

    def give_back(self, addr: np.ndarray) -> None:
        """Return chunks taken with chunks() and not submitted."""
        if self._owner is not None:
            self._owner.recycle(addr)
            return
        self._free[self._nfree:self._nfree + len(addr)] = addr & self._chunk_mask
        self._nfree += len(addr)

    @property
    def free_chunks(self) -> int:
        return self._nfree

    # --- sending --------------------------------------------------------------------

    def room(self, wanted: int) -> int:
        """How many descriptors the TX ring takes now, up to WANTED."""
        return min(wanted, self._ring.room(wanted))

    def submit(self, addr: np.ndarray, length: np.ndarray) -> int:
        """Publish the frames (ADDR, LENGTH) on the TX ring, as many as fit,
        from the first; returns how many. Kick (push()) to have them sent."""
        n = self._ring.put(addr, length)
        self.tally.submitted += n
        return n

    def kick(self) -> int:
        """sendto(MSG_DONTWAIT) if the TX ring asks for it; returns its errno
        (0: nothing left for the kernel, or no kick needed). EAGAIN: the
        kernel's budget ran out with more to send, or the completion ring
        or the socket's send buffer is full. EBUSY: the driver dropped the
        frame it was given (counted). ENETDOWN and ENXIO raise."""
        if not self._ring.needs_wakeup:
            return 0
        self.tally.kicks += 1
        if _libc.sendto(self._socket.fileno(), None, 0, MSG_DONTWAIT, None, 0) >= 0:
            return 0
        err = ctypes.get_errno()
        if err == errno.EBUSY:
            self.tally.driver_dropped += 1
        elif err == errno.ENETDOWN:
            raise ZerolayerError(f"{self.ifname} is down (`ip link set {self.ifname} up`)")
        elif err == errno.ENXIO:
            raise ZerolayerError(f"the AF_XDP socket on {self.ifname} queue {self.queue} lost its "
                                 "interface")
        elif err != errno.EAGAIN:
            name = errno.errorcode.get(err, str(err))
            self.tally.kick_errors[name] = self.tally.kick_errors.get(name, 0) + 1
        return err

    def push(self) -> None:
        """Kick until a kick ends without EAGAIN: the kernel found nothing
        more to send (or failed), and has then published how far it read
        the TX ring. At most one kick per budget's worth of what the ring
        held: a kick can end in EAGAIN with nothing sent when the send
        buffer is full (reap, wait, push again). The kick's answer is what
        counts, not the ring's consumer index: 6.1 and 6.12 publish that
        only when they next find their view of the ring used up, not after
        each kick (6.18 does after each)."""
        unsent = self._ring.unsent
        if not unsent:
            return
        for _ in range(unsent // self.budget + 1):
            if self.kick() != errno.EAGAIN:
                return

    def reap(self) -> int:
        """Take the completions: own chunks go back to the free stack, a
        sharer's to the receiving socket's fill ring. Returns how many."""
        done = self._completion.take(self._completion.size)
        n = len(done)
        if n:
            self.tally.completed += n
            self.give_back(done)
        return n

    def wait(self, timeout: float = WAIT_S) -> None:
        """Wait for the TX ring to have room; in copy mode poll() also sends."""
        self._poll.poll(max(0, int(timeout * 1000)) or 1)

    @property
    def in_flight(self) -> int:
        """Frames submitted and neither completed nor refused by the kernel."""
        return self.tally.submitted - self.tally.completed - self.statistics().tx_invalid_descs

    def flush(self, timeout: float = 1.0) -> int:
        """Push and reap until every frame submitted is completed, or TIMEOUT
        seconds pass; returns how many are still in flight."""
        deadline = time.monotonic() + timeout
        while True:
            self.push()
            self.reap()
            left = self.in_flight
            if not left or time.monotonic() >= deadline:
                return left
            self.wait()

    @property
    def memory_bytes(self) -> int:
        """UMEM (when owned) and the TX and completion rings."""
        own = super().memory_bytes
        return own + 16 * self.tx_size + (8 * self.frames if own else 0)

    def describe(self) -> dict:
        return {"interface": self.ifname, "netns": self.netns, "queue": self.queue,
                "mode": self.mode, "note": self.mode_note, "chunk_size": self.chunk_size,
                "frames": self.frames, "tx_size": self.tx_size, "budget": self.budget,
                "shared_umem": self._owner is not None}
