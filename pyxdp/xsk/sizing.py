# SPDX-License-Identifier: Apache-2.0
"""How big `zerolayer listen` makes each queue's AF_XDP socket, and what
that costs. Plain numbers, so the CLI's --help can state them without
loading the socket code.

The defaults hold a burst of 20,000 datagrams whole, arriving faster than
any Python reader (the lab generator sends about a million a second), in
the RX ring and the UMEM, without the reader being scheduled at all: each
datagram takes one RX descriptor and one UMEM chunk until it is read.
"""

DEFAULT_FRAMES = 1 << 15  # UMEM chunks
DEFAULT_RING_SIZE = 1 << 15  # RX ring entries
LIMITS = (64, 1 << 20)  # for either, a power of two

RX_DESC_BYTES = 16  # struct xdp_desc
FILL_SLOT_BYTES = 8  # a chunk address; the fill ring has two slots per chunk


def memory_bytes(frames: int, chunk_size: int, ring_size: int) -> int:
    """What one socket maps: UMEM, the RX ring and the fill ring."""
    return frames * chunk_size + ring_size * RX_DESC_BYTES + 2 * frames * FILL_SLOT_BYTES


def mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def problem(value: int) -> str | None:
    """What is wrong with VALUE as a number of chunks or ring entries, or None.
    The kernel wants rings of a power of two; the fill ring has 2 × chunks."""
    low, high = LIMITS
    if not low <= value <= high or value & (value - 1):
        return f"must be a power of two from {low} to {high}, not {value}"
    return None
