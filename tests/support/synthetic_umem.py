# SPDX-License-Identifier: Apache-2.0
"""Batches over a UMEM the test fills itself: packets laid out in chunks as
copy mode lays them, for the pure tests of what Batch computes (the UMEM
and its rings are pyxdp.xsk.synthetic's, which the bench uses too)."""

import random

import numpy as np

from pyxdp.xsk.batch import Batch
from pyxdp.xsk.synthetic import CHUNK, HEADROOM, SyntheticUmem

__all__ = ["CHUNK", "SyntheticUmem", "batch_of"]


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
