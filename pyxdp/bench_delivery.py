"""Delivery into Python, for `zerolayer bench`: rounds of pyxdp.xsk_bench
(AF_XDP against a UDP socket's recv_into loop, under the same generator
load) on the bench's lab, with zerolayer attached to its dut0.

pyxdp.xsk_bench owns the measurement; this module only runs it several
times and keeps, per round, what the bench reports.
"""

from . import generator as generator_mod, loader

FRAMES = 1_000_000
QUICK_FRAMES = 50_000


def measure(lab, *, rounds: int, quick: bool) -> dict:
    """Per-round lists: xsk_fps, udp_fps, their ratio, and frames lost by each."""
    from . import xsk_bench  # AF_XDP and numpy: only when this section runs

    frames = QUICK_FRAMES if quick else FRAMES
    out = {"xsk_fps": [], "udp_fps": [], "ratio": [], "xsk_lost": [], "udp_lost": []}
    loader.attach(lab.dut.ifname, netns=lab.dut.netns)
    try:
        # one generator for every round: each would otherwise recompile it
        gen = generator_mod.LiveGenerator(lab.peer.ifname, lab.peer.netns)
        for _ in range(rounds):
            run = xsk_bench.run(frames, lab=lab, generator=gen)
            out["xsk_fps"].append(run["xsk_fps"])
            out["udp_fps"].append(run["udp_fps"])
            out["ratio"].append(run["xsk_fps"] / run["udp_fps"] if run["udp_fps"] else 0.0)
            out["xsk_lost"].append(run["xsk"]["lost"]["total"])
            out["udp_lost"].append(run["udp"]["lost"]["total"])
            out["xsk_mode"] = run["xsk_mode"]
            out["last_round"] = run  # loss reasons and details, as xsk_bench gives them
    finally:
        loader.detach(lab.dut.ifname, lab.dut.netns)
    out["frames_offered"] = frames
    return out
