# SPDX-License-Identifier: Apache-2.0
"""Packets that arrived in several UMEM chunks, joined end to end.

A socket bound with XDP_USE_SG (Linux 6.6) takes a packet longer than a
chunk, such as a jumbo frame's 8 KB datagram, as several RX descriptors:
every one but the last has XDP_PKT_CONTD in its options. A Batch reads
each packet as one run of bytes, so a batch holding such a packet reads a
copy instead: Joined is what the Batch reads in place of its socket, every
packet of the batch copied one after the other into one buffer (a single
packet in one chunk is copied too: the batch stays one kind of thing).
Releasing the batch gives all its chunks back to the socket's fill ring.

The kernel publishes a packet's descriptors together, but a take of LIMIT
descriptors can stop inside one: split_partial() keeps the unfinished
packet's descriptors for the next take.
"""

import numpy as np

XDP_PKT_CONTD = 1  # uapi/linux/if_xdp.h: more of this packet follows
# Zeros after the last packet, so a header parse's fixed-width window never
# reads past the buffer (pyxdp.xsk.batch.HEADER_WINDOW is less).
_TAIL = 128


def split_partial(addr: np.ndarray, length: np.ndarray, options: np.ndarray):
    """(the descriptors of whole packets, those of a packet not yet ended):
    each an (addr, length, options) triple."""
    ends = np.flatnonzero((options & XDP_PKT_CONTD) == 0)
    cut = int(ends[-1]) + 1 if len(ends) else 0
    return ((addr[:cut], length[:cut], options[:cut]),
            (addr[cut:], length[cut:], options[cut:]))


def has_pieces(options: np.ndarray) -> bool:
    """Whether some packet of these descriptors spans several chunks."""
    return bool(np.any(options & XDP_PKT_CONTD))


class Joined:
    """The packets of whole-packet descriptors ADDR, LENGTH, OPTIONS from
    XSK's UMEM, joined: `addr` and `length` are per packet, offsets into
    `umem`. It has what a Batch asks of its socket."""

    def __init__(self, xsk, addr: np.ndarray, length: np.ndarray, options: np.ndarray):
        self._xsk = xsk
        self._chunks = addr
        self.queue = xsk.queue
        sizes = length.astype(np.int64)
        packet_of = np.concatenate(([0], np.cumsum((options[:-1] & XDP_PKT_CONTD) == 0)))
        per_packet = np.bincount(packet_of, weights=sizes).astype(np.int64)
        self.length = per_packet.astype(np.uint32)
        self.addr = np.concatenate(([0], np.cumsum(per_packet)[:-1])).astype(np.uint64)
        umem = xsk.umem
        pieces = [umem[a:a + n] for a, n in zip(addr.tolist(), sizes.tolist())]
        self.umem = np.concatenate([*pieces, np.zeros(_TAIL, np.uint8)])
        self.umem_view = self.umem.data

    def frame(self, addr: int, length: int) -> memoryview:
        return self.umem_view[addr:addr + length]

    def recycle(self, addr: np.ndarray) -> None:
        """Every chunk of the batch back to the socket, whatever ADDR says:
        a joined batch is released whole."""
        chunks, self._chunks = self._chunks, self._chunks[:0]
        self._xsk.recycle(chunks)
