# SPDX-License-Identifier: Apache-2.0
"""Delivery into Python, the `delivery` section of `zerolayer bench`: rounds
of pyxdp.bench.xsk_vs_udp (pyxdp's AF_XDP socket against a UDP socket at
each tier of work per frame, and a C consumer on libxdp at the touch tier,
under the same generator load) on the bench's lab, where the bench has
attached zerolayer to dut0.

pyxdp.bench.xsk_vs_udp owns the measurement; this module builds the C
consumer once, runs the rounds, the consumers of each tier in one order on
even rounds and the other on odd ones, and keeps per round what the bench
reports.
"""

from pyxdp.bench import TIERS, c_consumer

FRAMES = 1_000_000
QUICK_FRAMES = 50_000


def measure(lab, gen, *, rounds: int, frames: int = FRAMES) -> dict:
    """Per-round lists, by run name ("xsk_touch", "c_touch"...): frames/s
    ("fps") and frames lost ("lost"); per tier the ratio of pyxdp to the UDP
    socket, and pyxdp to C at the touch tier; the AF_XDP socket's mode, the
    C consumer's build, and the last round whole. GEN is the bench's
    LiveGenerator in the lab's peer namespace, reused by every round (a new
    one is a compile)."""
    from pyxdp.bench import xsk_vs_udp as xsk_bench  # AF_XDP and numpy: only when this section runs

    fps: dict[str, list[float]] = {}
    lost: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {tier: [] for tier in TIERS}
    ratios["xsk_vs_c"] = []
    run: dict = {}
    with c_consumer.built() as build:
        for i in range(rounds):
            run = xsk_bench.run(frames, lab=lab, generator=gen, c_binary=build.binary,
                                reverse=i % 2 == 1)
            for name, result in run["runs"].items():
                fps.setdefault(name, []).append(result["fps"])
                lost.setdefault(name, []).append(result["lost"]["total"])
            for tier in TIERS:
                ratios[tier].append(_ratio(run, f"xsk_{tier}", f"udp_{tier}"))
            if build.binary:
                ratios["xsk_vs_c"].append(_ratio(run, "xsk_touch", "c_touch"))
    # the last round's loss reasons and details, as xsk_bench gives them
    return {"fps": fps, "lost": lost, "ratio": ratios, "xsk_mode": run["xsk_mode"],
            "c_consumer": build.to_json(), "load": xsk_bench.LOAD, "last_round": run}


def _ratio(run: dict, over: str, under: str) -> float:
    runs = run["runs"]
    return runs[over]["fps"] / runs[under]["fps"] if runs[under]["fps"] else 0.0
