"""Batches over a UMEM the test fills itself: packets laid out in chunks as
copy mode lays them, for the pure tests of what Batch computes."""

import random

import numpy as np

from pyxdp.xsk.batch import Batch

CHUNK = 2048
HEADROOM = 256  # XDP_PACKET_HEADROOM: where copy mode puts a packet in its chunk


class SyntheticUmem:
    """What a Batch reads from its socket: a UMEM and the queue, here with
    packets placed by the test instead of the kernel."""

    queue = 0

    def __init__(self, chunks: int):
        self.umem = np.zeros(chunks * CHUNK, np.uint8)
        self.umem_view = memoryview(self.umem)
        self.recycled: list[int] = []

    def frame(self, addr: int, length: int) -> memoryview:
        return self.umem_view[addr:addr + length]

    def recycle(self, addr) -> None:
        self.recycled += [int(a) for a in addr]


def batch_of(packets: list[bytes], rng: random.Random | None = None) -> Batch:
    """PACKETS in chunks of a UMEM, in a shuffled chunk order (the kernel
    hands chunks back in any order), each at the copy-mode headroom."""
    rng = rng or random.Random(0)
    umem = SyntheticUmem(len(packets))
    chunks = list(range(len(packets)))
    rng.shuffle(chunks)
    addr = np.array([c * CHUNK + HEADROOM for c in chunks], np.uint64)
    for a, pkt in zip(addr, packets):
        umem.umem[int(a):int(a) + len(pkt)] = np.frombuffer(pkt, np.uint8)
    return Batch(umem, addr, np.array([len(p) for p in packets], np.uint32))
