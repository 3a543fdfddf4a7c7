# SPDX-License-Identifier: Apache-2.0
"""TokenSender: token frames to one UDP destination over AF_XDP, without
the socket layer: each datagram is written into a UMEM chunk, headers and
all, and handed to the kernel by descriptor.

    with TokenSender("eth0", to="198.18.0.1:9977") as sender:
        sender.send([Frame(FrameType.TOKEN, b"Hello"), Frame(FrameType.TOKEN, b" world")])
        sender.flush()

The destination is resolved once, as the kernel would route it, inside the
interface's namespace (pyxdp/kernel/routes.py): the route must leave
through the interface; the source address is the route's; the MACs are
the interface's and the next hop's neighbour entry (or one given). From
those, one header template (pyxdp/xsk/headers.py) serves every datagram.

send(frames) packs frames into as few datagrams as it can, in order: each
holds whole frames, at most MAX_FRAMES of them (more is `too_many_frames`
to a receiver, docs/spec.md §1.4) and at most what the path MTU lets a
UDP payload carry. Frames are never held back for a later call: a token
leaves in the call that sends it. send_datagrams(payloads) sends UDP
payloads as given. Both block while the TX ring or the UMEM is full (the
kernel has not completed enough yet), and flush() waits until the kernel
has completed every datagram.

Per batch (up to `batch` datagrams) the Python work is a fixed number of
calls, whatever the batch holds: the payloads are gathered into one
matrix, copied into their chunks and given headers, lengths and checksums
(pyxdp.xsk.headers.send_batch: one C call on the compiled core, a dozen
numpy calls on the pure path), the descriptors published, and the kernel
kicked.
"""

import socket
import time
from collections.abc import Iterable, Sequence

import numpy as np

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel import routes
from pyxdp.kernel.signals import ClosedOnExit
from pyxdp.proto import frames as frames_mod
from pyxdp.proto.ethernet import ETH_HLEN
from pyxdp.proto.frames import MAX_FRAMES, Frame
from pyxdp.xsk import headers
from pyxdp.xsk.tx import CHUNK_SIZES, XskTxSocket, chunk_size_for

BATCH = 1024  # most datagrams per submit: larger batches measured faster on veth (docs/benchmarks.md, Sending)
STALL_S = 5.0  # the kernel took nothing for this long: give up, say so
_NO_ADDR = np.empty(0, np.uint64)


class TokenSender(ClosedOnExit):
    """Token datagrams from IFACE (inside NETNS) to TO ("ADDR:PORT", IPv6 as
    "[ADDR]:PORT"), on the interface's queue QUEUE.

    sport: UDP source port; None: a free one, held by a UDP socket bound to
    it for the sender's life (so replies reach no other program).
    dst_mac: the next hop's MAC, instead of the kernel's neighbour entry.
    frames, tx_size, bind, budget: the AF_XDP socket's (pyxdp.xsk.tx).
    batch: datagrams per submit."""

    def __init__(self, iface: str, to: str, *, netns: str | None = None, queue: int = 0,
                 sport: int | None = None, dst_mac: str | None = None, frames: int = 4096,
                 tx_size: int = 2048, bind: str = "auto", budget: int | None = None,
                 batch: int = BATCH):
        self.destination = routes.parse_endpoint(to)
        if sport is not None and not 0 < sport < 65536:
            raise ZerolayerError(f"source port {sport} is not 1-65535")
        if not 1 <= batch <= tx_size:
            raise ZerolayerError(f"a batch is 1 to the TX ring's {tx_size} datagrams, not {batch}")
        self.iface, self.netns, self.batch = iface, netns, batch
        self._port_holder: socket.socket | None = None
        self.tx: XskTxSocket | None = None
        self.datagrams = self.frames = 0
        try:
            self.hop = routes.resolve(self.destination.address, iface, netns, dst_mac)
            self.sport = sport or self._hold_port()
            self.template = headers.template(self.hop.src_mac, self.hop.dst_mac, self.hop.src,
                                             self.destination.address, self.sport,
                                             self.destination.port)
            # A frame must fit one chunk: past the largest, the MTU is cut to it.
            self.mtu = min(self.hop.mtu, CHUNK_SIZES[-1] - ETH_HLEN)
            self.max_payload = self.template.max_payload(self.mtu)
            self.tx = XskTxSocket(iface, queue, netns=netns, frames=frames,
                                  chunk_size=chunk_size_for(ETH_HLEN + self.mtu),
                                  tx_size=tx_size, bind=bind, budget=budget)
        except BaseException:
            self.close()
            raise

    def _hold_port(self) -> int:
        family = socket.AF_INET6 if self.destination.version == 6 else socket.AF_INET
        with netns_mod.entered(self.netns):
            self._port_holder = socket.socket(family, socket.SOCK_DGRAM)
        self._port_holder.bind((self.hop.src, 0))
        return self._port_holder.getsockname()[1]

    @property
    def source(self) -> str:
        return str(routes.Endpoint(self.hop.src, self.sport))

    @property
    def _tx(self) -> XskTxSocket:
        if self.tx is None:
            raise ZerolayerError(f"the sender on {self.iface} is closed")
        return self.tx

    # --- sending --------------------------------------------------------------------

    def send(self, frames: Iterable[Frame | tuple]) -> int:
        """Send FRAMES (Frame, or (type, payload) pairs), packed into
        datagrams; returns how many datagrams."""
        encoded = [f.encode() if isinstance(f, Frame) else frames_mod.encode(*f) for f in frames]
        if not encoded:
            return 0
        sizes = np.fromiter(map(len, encoded), np.int64, len(encoded))
        if int(sizes.max()) > self.max_payload:
            raise ZerolayerError(
                f"a {int(sizes.max())}-byte frame does not fit a datagram to {self.destination} "
                f"(path MTU {self.mtu}: {self.max_payload} bytes of UDP payload)")
        payloads = [b"".join(encoded[a:b]) for a, b in pack(sizes, self.max_payload)]
        sent = self.send_datagrams(payloads)
        self.frames += len(encoded)
        return sent

    def send_datagrams(self, payloads: Sequence[bytes]) -> int:
        """Send each of PAYLOADS as one datagram's UDP payload, as given;
        returns how many."""
        if not len(payloads):
            return 0
        rows, lengths = headers.payload_matrix(payloads)
        return self.send_rows(rows, lengths)

    def send_rows(self, rows: np.ndarray, lengths: np.ndarray) -> int:
        """Send datagram i with the first LENGTHS[i] bytes of ROWS[i] as its
        UDP payload (ROWS: (n, width) uint8); returns how many."""
        if len(lengths) and int(lengths.max()) > self.max_payload:
            raise ZerolayerError(
                f"a {int(lengths.max())}-byte UDP payload does not fit a datagram to "
                f"{self.destination} (path MTU {self.mtu}: at most {self.max_payload})")
        tx, t, n = self._tx, self.template, len(lengths)
        done = 0
        stalled = None
        while done < n:
            room = tx.room(min(self.batch, n - done))
            addr = tx.chunks(room) if room else _NO_ADDR
            if not len(addr):
                stalled = self._wait_for_room(stalled)
                continue
            stalled = None
            part = slice(done, done + len(addr))
            tx.submit(addr, headers.send_batch(tx.umem, addr, rows[part], lengths[part], t))
            tx.push()
            tx.reap()
            done += len(addr)
        self.datagrams += n
        return n

    def _wait_for_room(self, since: float | None) -> float:
        """No room in the TX ring or no free chunk: kick, reap, and wait a
        moment; raise if the kernel has taken nothing for STALL_S."""
        tx = self._tx
        tx.tally.ring_full += 1
        tx.push()
        if tx.reap():
            return time.monotonic()
        now = time.monotonic()
        if since is not None and now - since > STALL_S:
            raise ZerolayerError(
                f"the kernel completed nothing sent on {self.iface} for {STALL_S:.0f} s "
                f"({tx.in_flight} datagrams in flight): is the link up and carrying?")
        tx.wait()
        return since if since is not None else now

    def flush(self, timeout: float = 1.0) -> int:
        """Wait until the kernel has completed every datagram sent, up to
        TIMEOUT seconds; returns how many are still in flight."""
        return self._tx.flush(timeout)

    # --- reporting and lifetime -------------------------------------------------------

    @property
    def mode(self) -> str | None:
        return self.tx.mode if self.tx else None

    def describe(self) -> dict:
        tx = self._tx
        return {"interface": self.iface, "netns": self.netns, "queue": tx.queue,
                "mode": tx.mode, "note": tx.mode_note, "to": str(self.destination),
                "from": self.source, "route": self.hop.to_json(), "path_mtu": self.mtu,
                "max_payload": self.max_payload, "batch": self.batch, "budget": tx.budget,
                "frames": tx.frames, "chunk_size": tx.chunk_size, "tx_size": tx.tx_size}

    def close(self) -> None:
        if self.tx is not None:
            self.tx.close()
            self.tx = None
        if self._port_holder is not None:
            self._port_holder.close()
            self._port_holder = None


def pack(sizes: np.ndarray, max_payload: int, max_frames: int = MAX_FRAMES) -> list[tuple[int, int]]:
    """Greedy packing of frames of SIZES (encoded bytes, each at most
    MAX_PAYLOAD), in order: (start, end) frame ranges, one per datagram,
    each at most MAX_PAYLOAD bytes and MAX_FRAMES frames. One searchsorted
    per datagram, nothing per frame."""
    ends = np.cumsum(sizes)
    out, start, n = [], 0, len(sizes)
    while start < n:
        before = int(ends[start - 1]) if start else 0
        end = int(np.searchsorted(ends, before + max_payload, side="right"))
        end = min(end, start + max_frames, n)
        out.append((start, end))
        start = end
    return out
