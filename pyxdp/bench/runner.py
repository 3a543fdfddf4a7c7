"""`zerolayer bench`: every performance figure zerolayer quotes, measured in
one run on a lab it builds itself, each against its floor side by side.

1. Parser cost (pyxdp.bench.parser): ns per datagram, zerolayer's program
   against an XDP_PASS-only program, through BPF_PROG_TEST_RUN, for 1, 4
   and 16 frames per datagram.
2. XDP path throughput on veth (pyxdp.bench.xdp_path): datagrams/s counted by
   zerolayer against a count-and-pass program, under the same generator load.
3. Delivery into Python (pyxdp.bench.delivery): frames/s and frames lost,
   AF_XDP against a UDP socket.

Every figure is the median of several rounds, with the min and the max;
ratios are taken within a round, then their median. Quick mode (for CI) runs
every section with fewer and shorter rounds: it produces every key, and its
numbers are not meant to be quoted.
"""

import os
import platform
import statistics
import time
from dataclasses import dataclass

from pyxdp.bench import delivery as bench_delivery
from pyxdp.bench import parser as bench_parser
from pyxdp.bench import xdp_path as bench_xdp
from pyxdp.lab import generator
from pyxdp.lab import veth_lab as lab_mod
from pyxdp.xdp import loader, pins
from pyxdp.xdp.testrun import PassProgram, TokenProgram


@dataclass(frozen=True)
class Plan:
    parser_rounds: int
    parser_repeats: tuple[int, ...]
    xdp_rounds: int
    xdp_settle_s: float
    xdp_window_s: float
    xdp_chunk: int
    delivery_rounds: int
    delivery_frames: int
    quick: bool


FULL = Plan(parser_rounds=5, parser_repeats=bench_parser.REPEATS, xdp_rounds=10,
            xdp_settle_s=0.05, xdp_window_s=0.3, xdp_chunk=bench_xdp.CHUNK,
            delivery_rounds=5, delivery_frames=bench_delivery.FRAMES, quick=False)
QUICK = Plan(parser_rounds=2, parser_repeats=bench_parser.QUICK_REPEATS, xdp_rounds=2,
             xdp_settle_s=0.02, xdp_window_s=0.1, xdp_chunk=bench_xdp.QUICK_CHUNK,
             delivery_rounds=2, delivery_frames=bench_delivery.QUICK_FRAMES, quick=True)


@dataclass(frozen=True)
class Target:
    what: str
    key: str  # a ratio of the report; "parser_ratio.4" is the 4-frame entry
    op: str  # "<=" or ">="
    bound: float
    kind: str = "target"  # or "goal"


DELIVERY = "delivery into Python, AF_XDP against a UDP socket"
TARGETS = [
    Target("parser cost at 4 frames/datagram, against the XDP_PASS floor", "parser_ratio.4",
           "<=", 2.0),
    Target("XDP path throughput on veth, against a count-and-pass program", "xdp_ratio",
           ">=", 0.8),
    Target(DELIVERY, "delivery_ratio", ">=", 2.0),
    Target(DELIVERY, "delivery_ratio", ">=", 3.0, "goal"),
]


def figure(values) -> dict:
    """The median of the rounds, with min, max and the rounds themselves."""
    values = [float(v) for v in values]
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "rounds": len(values), "values": [round(v, 4) for v in values]}


def machine() -> dict:
    """What the figures were measured on."""
    info = {"kernel": platform.release(), "arch": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
        fields = dict(ln.split(":", 1) for ln in reversed(lines) if ":" in ln)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        info["cpu_model"] = fields.get("model name")
        info["virtualized"] = "hypervisor" in fields.get("flags", "").split()
    except OSError:
        pass
    try:
        with open("/sys/devices/system/cpu/vulnerabilities/spectre_v2") as f:
            info["spectre_v2"] = f.read().strip()
    except OSError:
        pass
    return info


def run(quick: bool = False, progress=lambda line: None) -> dict:
    plan = QUICK if quick else FULL
    started = time.monotonic()
    lab_mod.sweep_stale()
    report = {"machine": machine(), "quick": plan.quick}

    progress("compiling the programs (zerolayer, XDP_PASS floor, count-and-pass, generator)")
    floor, counter = PassProgram(), bench_xdp.CountProgram()
    with lab_mod.Lab() as lab:
        gen = generator.LiveGenerator(lab.peer.ifname, lab.peer.netns)
        # Attached once: every section uses this program (the delivery
        # section needs its pinned XSKMAP), so it is compiled once.
        loader.attach(lab.dut.ifname, mode=bench_xdp.MODE, netns=lab.dut.netns)
        try:
            token = TokenProgram(pin_dir=pins.pin_dir(lab.dut.ifname, lab.dut.netns))
            _sections(report, plan, lab, token, floor, counter, gen, progress)
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)

    report["targets"] = targets(report)
    report["duration_s"] = round(time.monotonic() - started, 1)
    return report


def _sections(report, plan, lab, token, floor, counter, gen, progress) -> None:
    """The three sections, side by side on one lab, into REPORT."""
    progress(f"parser cost: {plan.parser_rounds} rounds, BPF_PROG_TEST_RUN, "
             f"{plan.parser_repeats[0]:,}..{plan.parser_repeats[-1]:,} repetitions")
    parser = bench_parser.measure(token, floor, lab, rounds=plan.parser_rounds,
                                  repeats=plan.parser_repeats)
    by = parser["by_frames"]
    report.update({
        "parser_ns": {str(n): figure(r["parser_ns"]) for n, r in by.items()},
        "pass_floor_ns": {str(n): figure(r["pass_floor_ns"]) for n, r in by.items()},
        "parser_ratio": {str(n): figure(r["ratio"]) for n, r in by.items()},
        "parser_method": (
            f"slope of thread CPU time over {len(plan.parser_repeats)} repetition counts "
            f"({plan.parser_repeats[0]:,}..{plan.parser_repeats[-1]:,}), pinned to CPU "
            f"{parser['cpu']}; IPv4 UDP datagrams of N 16-byte TOKEN frames"
        ),
    })

    progress(f"XDP path on veth: {plan.xdp_rounds} rounds of two {plan.xdp_window_s} s "
             "windows, generator flat out")
    load = generator.Mix.single(bench_parser.packet(lab, 4))
    xdp = bench_xdp.measure(lab, token, counter, gen, load, rounds=plan.xdp_rounds,
                            settle_s=plan.xdp_settle_s, window_s=plan.xdp_window_s,
                            chunk=plan.xdp_chunk)
    report.update({
        "xdp_mode": xdp["mode"],
        "xdp_load": "IPv4 UDP datagrams of 4 16-byte TOKEN frames",
        "zerolayer_dps": figure(xdp["zerolayer_dps"]),
        "pass_counter_dps": figure(xdp["pass_counter_dps"]),
        "xdp_ratio": figure(xdp["ratio"]),
        "generator_pps": round(xdp["generator_pps"], 1),
        "generator_sent": xdp["generator_sent"],
        "seen_by_dut": xdp["seen_by_dut"],
    })

    progress(f"delivery into Python: {plan.delivery_rounds} rounds, AF_XDP and a UDP socket")
    delivery = bench_delivery.measure(lab, gen, rounds=plan.delivery_rounds,
                                      frames=plan.delivery_frames)
    report.update({
        "xsk_mode": delivery["xsk_mode"],
        "delivery_frames_offered": plan.delivery_frames,
        "xsk_fps": figure(delivery["xsk_fps"]),
        "udp_fps": figure(delivery["udp_fps"]),
        "delivery_ratio": figure(delivery["ratio"]),
        "xsk_lost": figure(delivery["xsk_lost"]),
        "udp_lost": figure(delivery["udp_lost"]),
        "delivery_last_round": delivery["last_round"],
    })


def figure_of(report: dict, key: str) -> dict | None:
    """The figure a target's KEY names ("parser_ratio.4": the 4-frame entry)."""
    key, _, frames = key.partition(".")
    fig = report.get(key)
    return fig[frames] if fig is not None and frames else fig


def targets(report: dict) -> list[dict]:
    """Each target and goal of the issue, with the median measured against it."""
    out = []
    for t in TARGETS:
        fig = figure_of(report, t.key)
        measured = fig["median"] if fig else None
        met = None
        if measured is not None:
            met = measured <= t.bound if t.op == "<=" else measured >= t.bound
        out.append({"what": t.what, "kind": t.kind, "key": t.key, "bound": f"{t.op} {t.bound}",
                    "measured": measured, "met": met})
    return out
