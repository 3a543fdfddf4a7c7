# SPDX-License-Identifier: Apache-2.0
"""AF_XDP without a kernel: a UMEM and rings in anonymous memory, with the
caller playing the kernel's side. The rings are pyxdp.xsk.rings' own
classes over that memory, so both cores (pyxdp/xsk/core.py) run on them
exactly as on a socket's mappings. For the tests of what a Batch computes
and for the `core` section of `zerolayer bench`.
"""

import numpy as np

from pyxdp.xsk.rings import CompletionRing, FillRing, RingOffsets, RxRing, TxRing

CHUNK = 2048
HEADROOM = 256  # XDP_PACKET_HEADROOM: where copy mode puts a packet in its chunk
# One cache line each for the producer, the consumer and the flags, then the entries.
_OFFSETS = RingOffsets(producer=0, consumer=64, desc=192, flags=128)


class SyntheticUmem:
    """What a Batch reads from its socket: a UMEM and the queue. recycle()
    records the chunks given back, or publishes them on FILL when given."""

    queue = 0

    def __init__(self, chunks: int, fill: FillRing | None = None):
        self.umem = np.zeros(chunks * CHUNK, np.uint8)
        self.umem_view = self.umem.data
        self.chunk_mask = np.uint64(~(CHUNK - 1) & 0xFFFFFFFFFFFFFFFF)
        self.recycled: list[int] = []
        self._fill = fill

    def frame(self, addr: int, length: int) -> memoryview:
        return self.umem_view[addr:addr + length]

    def recycle(self, addr) -> None:
        if self._fill is not None:
            self._fill.put(addr, int(self.chunk_mask))
        else:
            self.recycled += [int(a) for a in addr]


def ring(kind, size: int):
    """A ring of KIND (RxRing, FillRing, TxRing, CompletionRing) of SIZE
    entries in anonymous memory."""
    return kind(-1, 0, _OFFSETS, size)


def index(r, which: str) -> np.ndarray:
    """R's producer or consumer index as a one-element u32 view: the
    kernel's side of the ring, written by the caller."""
    return np.frombuffer(r._map, np.uint32, 1, getattr(_OFFSETS, which))


def entries(r, words: int) -> np.ndarray:
    """R's entries as (size, WORDS) u32: 4 for descriptors, 2 for addresses."""
    return np.frombuffer(r._map, np.uint32, r.size * words, _OFFSETS.desc).reshape(r.size, words)


__all__ = ["CHUNK", "HEADROOM", "SyntheticUmem", "ring", "index", "entries", "RxRing",
           "FillRing", "TxRing", "CompletionRing"]
