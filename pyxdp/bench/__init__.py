# SPDX-License-Identifier: Apache-2.0
"""`zerolayer bench`: every performance figure zerolayer quotes, each against its floor, side by side in one run.

The sections, in the order they run and report (pyxdp.bench.runner):
parser (parser cost), xdp (XDP path throughput), delivery (delivery into
Python), tx (sending over AF_XDP), forward (XDP forwarding through a
router), relay (the TCP relay) and core (what a batch costs Python's
receive and send paths, pure core against compiled). Kept here, light, for the CLI to list,
with the delivery section's tiers of work per frame (done by
pyxdp.bench.tiers) and the report keys of their figures.
"""

SECTIONS = ("parser", "xdp", "delivery", "tx", "forward", "relay", "core")
DEFAULT_SECTIONS = ("parser", "xdp", "delivery", "tx", "forward", "core")

# Datagrams each sender of the tx section sends per round (pyxdp.bench.tx).
TX_DATAGRAMS = 500_000
TX_QUICK_DATAGRAMS = 20_000

TIERS = ("count", "touch", "act")
TIER_WORK = {
    "count": "count datagrams, read no byte of a frame (UDP: recv_into)",
    "touch": "each frame's type and payload as Python objects (FrameType, memoryview)",
    "act": "touch, and each TOKEN frame's text appended to its flow's stream",
}


def delivery_keys(tier: str) -> dict[str, str]:
    """The report keys of TIER's figures: frames/s of pyxdp ("xsk") and of
    the UDP socket ("udp"), their ratio, and the frames each lost. The count
    tier keeps the keys the section had before it had tiers."""
    if tier == "count":
        return {"xsk": "xsk_fps", "udp": "udp_fps", "ratio": "delivery_ratio",
                "xsk_lost": "xsk_lost", "udp_lost": "udp_lost"}
    return {"xsk": f"xsk_{tier}_fps", "udp": f"udp_{tier}_fps",
            "ratio": f"delivery_{tier}_ratio", "xsk_lost": f"xsk_{tier}_lost",
            "udp_lost": f"udp_{tier}_lost"}
