"""Delivery into Python, the `delivery` section of `zerolayer bench`: rounds
of pyxdp.bench.xsk_vs_udp (AF_XDP against a UDP socket's recv_into loop,
under the same generator load) on the bench's lab, where the bench has
attached zerolayer to dut0.

pyxdp.bench.xsk_vs_udp owns the measurement; this module only runs it several
times and keeps, per round, what the bench reports.
"""

FRAMES = 1_000_000
QUICK_FRAMES = 50_000


def measure(lab, gen, *, rounds: int, frames: int = FRAMES) -> dict:
    """Per-round lists: xsk_fps, udp_fps, their ratio, and frames lost by
    each, FRAMES offered per round; the AF_XDP socket's mode, and the last
    round whole. GEN is the bench's LiveGenerator in the lab's peer
    namespace, reused by every round (a new one is a compile)."""
    from pyxdp.bench import xsk_vs_udp as xsk_bench  # AF_XDP and numpy: only when this section runs

    out: dict[str, list[float]] = {"xsk_fps": [], "udp_fps": [], "ratio": [], "xsk_lost": [],
                                   "udp_lost": []}
    run: dict = {}
    for _ in range(rounds):
        run = xsk_bench.run(frames, lab=lab, generator=gen)
        out["xsk_fps"].append(run["xsk_fps"])
        out["udp_fps"].append(run["udp_fps"])
        out["ratio"].append(run["xsk_fps"] / run["udp_fps"] if run["udp_fps"] else 0.0)
        out["xsk_lost"].append(run["xsk"]["lost"]["total"])
        out["udp_lost"].append(run["udp"]["lost"]["total"])
    # the last round's loss reasons and details, as xsk_bench gives them
    return {**out, "xsk_mode": run["xsk_mode"], "last_round": run}
