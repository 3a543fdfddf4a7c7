# SPDX-License-Identifier: Apache-2.0
"""`zerolayer bench`: every performance figure zerolayer quotes, each
against its floor side by side, in sections run one after the other.

- parser (pyxdp.bench.parser): parser cost in ns per datagram, zerolayer's
  program against an XDP_PASS-only program, through BPF_PROG_TEST_RUN, for
  1, 4 and 16 frames per datagram.
- xdp (pyxdp.bench.xdp_path): XDP path throughput on veth, datagrams/s
  counted by zerolayer against a count-and-pass program, under the same
  generator load.
- delivery (pyxdp.bench.delivery): delivery into Python, frames/s and
  frames lost, pyxdp's AF_XDP socket against a UDP socket at three tiers of
  work per frame (count, touch, act), and against a C consumer on libxdp at
  the touch tier.
- tx (pyxdp.bench.tx): sending, datagrams/s counted at the lab's dut0,
  TokenSender (AF_XDP) against a socket.sendto loop and sendmmsg(2), the
  same datagrams, with two things for dut0 to do with them after XDP.
- forward (pyxdp.bench.forward): XDP forwarding, datagrams/s through a
  router (three namespaces) with zerolayer forwarding against the kernel's
  own IP forwarding, under the same generator load.
- relay (pyxdp.bench.relay): the TCP relay, frames/s and frame latency
  through the sockmap relay against the asyncio relay and a direct
  connection, on loopback.
- core (pyxdp.bench.core_cost): what a batch of 16, 256 and 1,024
  datagrams costs Python's receive and send paths, fixed per batch and per
  frame, the pure core against the compiled one, on synthetic rings.

The first four share one veth lab, built for the run, with zerolayer
attached to its dut0; forward builds a routed lab of its own; the relay
and core need none. Without a choice, all but the relay run. Every figure is the
median of several rounds, with the min and the max; ratios are taken within a round, then their median. Quick mode
(for CI) runs each section with fewer and shorter rounds: it produces every
key, and its numbers are not meant to be quoted.
"""

import dataclasses
import os
import platform
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from pyxdp.bench import DEFAULT_SECTIONS, SECTIONS, TIERS, delivery_keys
from pyxdp.bench import core_cost as bench_core
from pyxdp.bench import delivery as bench_delivery
from pyxdp.bench import forward as bench_forward
from pyxdp.bench import parser as bench_parser
from pyxdp.bench import relay as bench_relay
from pyxdp.bench import tx as bench_tx
from pyxdp.bench import xdp_path as bench_xdp
from pyxdp.bench.figures import figure, figure_of
from pyxdp.lab import generator
from pyxdp.lab import veth_lab as lab_mod
from pyxdp.xdp import loader, pins
from pyxdp.xdp.testrun import PassProgram, TokenProgram

LAB_SECTIONS = ("parser", "xdp", "delivery", "tx")

Progress = Callable[[str], None]


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
    tx_rounds: int
    tx_datagrams: int
    forward_rounds: int
    relay: bench_relay.Plan
    core_rounds: int
    core_repeats: int
    quick: bool


FULL = Plan(parser_rounds=5, parser_repeats=bench_parser.REPEATS, xdp_rounds=10,
            xdp_settle_s=0.05, xdp_window_s=0.3, xdp_chunk=bench_xdp.CHUNK,
            delivery_rounds=5, delivery_frames=bench_delivery.FRAMES, tx_rounds=5,
            tx_datagrams=bench_tx.DATAGRAMS, forward_rounds=10, relay=bench_relay.FULL,
            core_rounds=5, core_repeats=bench_core.REPEATS, quick=False)
QUICK = Plan(parser_rounds=2, parser_repeats=bench_parser.QUICK_REPEATS, xdp_rounds=2,
             xdp_settle_s=0.02, xdp_window_s=0.1, xdp_chunk=bench_xdp.QUICK_CHUNK,
             delivery_rounds=2, delivery_frames=bench_delivery.QUICK_FRAMES, tx_rounds=2,
             tx_datagrams=bench_tx.QUICK_DATAGRAMS, forward_rounds=2, relay=bench_relay.QUICK,
             core_rounds=2, core_repeats=bench_core.QUICK_REPEATS, quick=True)


def plan(quick: bool = False, *, rounds: int | None = None,
         delivery_frames: int | None = None, relay_streams: Iterable[int] = (),
         relay_frames: int | None = None, tx_datagrams: int | None = None) -> Plan:
    """FULL or QUICK, with what is given in place of its own: ROUNDS for
    every section, the datagrams offered per delivery round, the relay's
    stream counts and the frames of a relay flood (all streams together),
    the datagrams each sender of the tx section sends per round."""
    base = QUICK if quick else FULL
    relay = base.relay
    streams = tuple(dict.fromkeys(relay_streams))  # in the order given, once each
    if streams:
        relay = dataclasses.replace(relay, streams=streams)
    if relay_frames is not None:
        relay = dataclasses.replace(relay, flood_frames=relay_frames)
    if rounds is not None:
        base = dataclasses.replace(base, parser_rounds=rounds, xdp_rounds=rounds,
                                   delivery_rounds=rounds, tx_rounds=rounds,
                                   forward_rounds=rounds, core_rounds=rounds)
        relay = dataclasses.replace(relay, rounds=rounds)
    if delivery_frames is not None:
        base = dataclasses.replace(base, delivery_frames=delivery_frames)
    if tx_datagrams is not None:
        base = dataclasses.replace(base, tx_datagrams=tx_datagrams)
    return dataclasses.replace(base, relay=relay)


@dataclass(frozen=True)
class Target:
    what: str
    key: str  # a ratio of the report; "parser_ratio.4" is the 4-frame entry
    op: str  # "<=" or ">="
    bound: float
    kind: str = "target"  # or "goal"


DELIVERY = "delivery into Python, every frame touched, AF_XDP against a UDP socket"
SENDING = "sending, datagrams/s at the receiver, TokenSender (AF_XDP) against socket.sendto"
FORWARDING = "forwarding through a router on veth, XDP against the kernel's IP forwarding"
TARGETS = [
    Target("parser cost at 4 frames/datagram, against the XDP_PASS floor", "parser_ratio.4",
           "<=", 2.0),
    Target("XDP path throughput on veth, against a count-and-pass program", "xdp_ratio",
           ">=", 0.8),
    Target(DELIVERY, "delivery_touch_ratio", ">=", 2.0),
    Target(DELIVERY, "delivery_touch_ratio", ">=", 3.0, "goal"),
    Target("delivery into Python, every frame touched, pyxdp against a C consumer on libxdp",
           "xsk_touch_vs_c_ratio", ">=", 0.8),
    Target(SENDING, "tx_ratio.xdp.vs_sendto", ">=", 2.0),
    Target(SENDING, "tx_ratio.xdp.vs_sendto", ">=", 3.0, "goal"),
    Target(FORWARDING, "forward_ratio", ">=", 2.0),
    Target(FORWARDING, "forward_ratio", ">=", 3.0, "goal"),
]


def machine() -> dict:
    """What the figures were measured on."""
    info: dict = {"kernel": platform.release(), "arch": platform.machine(),
                  "cpus": os.cpu_count(), "python": platform.python_version()}
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


def _quiet(line: str) -> None:
    pass


def run(sections: Collection[str] = DEFAULT_SECTIONS, plan: Plan = FULL,
        progress: Progress = _quiet) -> dict:
    """Run SECTIONS (names of SECTIONS, in any order; they run and report
    in SECTIONS' order) as PLAN says; returns the report (docs/spec.md §5.9)."""
    unknown = set(sections) - set(SECTIONS)
    if unknown or not sections:
        raise ValueError(f"bench sections are some of {', '.join(SECTIONS)}, not "
                         f"{', '.join(sorted(unknown)) or 'none'}")
    started = time.monotonic()
    report: dict = {"machine": machine(), "quick": plan.quick}
    if any(s in sections for s in LAB_SECTIONS):
        _lab_sections(report, sections, plan, progress)
    if "forward" in sections:
        report.update(_forward(plan, progress))
    if "relay" in sections:
        r = plan.relay
        progress(f"TCP relay: {r.rounds} round{'s' if r.rounds > 1 else ''} of "
                 f"{', '.join(map(str, r.streams))} streams, sockmap against asyncio and "
                 "direct, on loopback")
        report["relay"] = bench_relay.measure(r, progress)
    if "core" in sections:
        report["core"] = _core(plan, progress)
    report["targets"] = targets(report)
    report["duration_s"] = round(time.monotonic() - started, 1)
    return report


def _lab_sections(report: dict, sections: Collection[str], plan: Plan,
                  progress: Progress) -> None:
    """The sections that run on a veth lab with zerolayer attached to dut0,
    side by side on one lab, into REPORT. Each program is compiled once, and
    only if a section chosen needs it."""
    lab_mod.sweep_stale()
    needs_gen = "xdp" in sections or "delivery" in sections
    progress("compiling the programs (" + ", ".join(
        ["zerolayer"] + (["XDP_PASS floor"] if "parser" in sections else [])
        + (["count-and-pass"] if "xdp" in sections else [])
        + (["generator"] if needs_gen else [])) + ")")
    floor = PassProgram() if "parser" in sections else None
    counter = bench_xdp.CountProgram() if "xdp" in sections else None
    with lab_mod.Lab() as lab:
        gen = generator.LiveGenerator(lab.peer.ifname, lab.peer.netns) if needs_gen else None
        # Attached once: every section uses this program (the delivery
        # section needs its pinned XSKMAP), so it is compiled once.
        loader.attach(lab.dut.ifname, mode=bench_xdp.MODE, netns=lab.dut.netns)
        try:
            token = TokenProgram(pin_dir=pins.pin_dir(lab.dut.ifname, lab.dut.netns))
            if floor is not None:
                report.update(_parser(plan, lab, token, floor, progress))
            if counter is not None and gen is not None:
                report.update(_xdp(plan, lab, token, counter, gen, progress))
            if "delivery" in sections and gen is not None:
                report.update(_delivery(plan, lab, gen, progress))
            if "tx" in sections:
                report.update(_tx(plan, lab, progress))
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)


def _parser(plan: Plan, lab, token: TokenProgram, floor: PassProgram,
            progress: Progress) -> dict:
    progress(f"parser cost: {plan.parser_rounds} rounds, BPF_PROG_TEST_RUN, "
             f"{plan.parser_repeats[0]:,}..{plan.parser_repeats[-1]:,} repetitions")
    parser = bench_parser.measure(token, floor, lab, rounds=plan.parser_rounds,
                                  repeats=plan.parser_repeats)
    by = parser["by_frames"]
    return {
        "parser_ns": {str(n): figure(r["parser_ns"]) for n, r in by.items()},
        "pass_floor_ns": {str(n): figure(r["pass_floor_ns"]) for n, r in by.items()},
        "parser_ratio": {str(n): figure(r["ratio"]) for n, r in by.items()},
        "parser_method": (
            f"slope of thread CPU time over {len(plan.parser_repeats)} repetition counts "
            f"({plan.parser_repeats[0]:,}..{plan.parser_repeats[-1]:,}), pinned to CPU "
            f"{parser['cpu']}; IPv4 UDP datagrams of N 16-byte TOKEN frames"
        ),
    }


def _xdp(plan: Plan, lab, token: TokenProgram, counter: bench_xdp.CountProgram,
         gen: generator.LiveGenerator, progress: Progress) -> dict:
    progress(f"XDP path on veth: {plan.xdp_rounds} rounds of two {plan.xdp_window_s} s "
             "windows, generator flat out")
    load = generator.Mix.single(bench_parser.packet(lab, 4))
    xdp = bench_xdp.measure(lab, token, counter, gen, load, rounds=plan.xdp_rounds,
                            settle_s=plan.xdp_settle_s, window_s=plan.xdp_window_s,
                            chunk=plan.xdp_chunk)
    return {
        "xdp_mode": xdp["mode"],
        "xdp_load": "IPv4 UDP datagrams of 4 16-byte TOKEN frames",
        "zerolayer_dps": figure(xdp["zerolayer_dps"]),
        "pass_counter_dps": figure(xdp["pass_counter_dps"]),
        "xdp_ratio": figure(xdp["ratio"]),
        "generator_pps": round(xdp["generator_pps"], 1),
        "generator_sent": xdp["generator_sent"],
        "seen_by_dut": xdp["seen_by_dut"],
    }


def _delivery(plan: Plan, lab, gen: generator.LiveGenerator, progress: Progress) -> dict:
    progress(f"delivery into Python: {plan.delivery_rounds} rounds of "
             f"{plan.delivery_frames:,} datagrams per consumer and tier (count, touch, act), "
             "AF_XDP, a UDP socket and a C consumer (touch)")
    d = bench_delivery.measure(lab, gen, rounds=plan.delivery_rounds,
                               frames=plan.delivery_frames)
    fps, lost, ratio = d["fps"], d["lost"], d["ratio"]
    has_c = "c_touch" in fps
    report = {"xsk_mode": d["xsk_mode"], "delivery_frames_offered": plan.delivery_frames,
              "delivery_load": d["load"]}
    for tier in TIERS:
        keys = delivery_keys(tier)
        report[keys["xsk"]] = figure(fps[f"xsk_{tier}"])
        report[keys["udp"]] = figure(fps[f"udp_{tier}"])
        report[keys["ratio"]] = figure(ratio[tier])
    report["c_touch_fps"] = figure(fps["c_touch"]) if has_c else None
    report["xsk_touch_vs_c_ratio"] = figure(ratio["xsk_vs_c"]) if has_c else None
    report["c_consumer"] = {**d["c_consumer"],
                            "mode": d["last_round"]["runs"].get("c_touch", {}).get("mode")}
    for tier in TIERS:
        keys = delivery_keys(tier)
        report[keys["xsk_lost"]] = figure(lost[f"xsk_{tier}"])
        report[keys["udp_lost"]] = figure(lost[f"udp_{tier}"])
    report["c_touch_lost"] = figure(lost["c_touch"]) if has_c else None
    report["delivery_last_round"] = d["last_round"]
    return report


def _tx(plan: Plan, lab, progress: Progress) -> dict:
    progress(f"sending: {plan.tx_rounds} rounds of {plan.tx_datagrams:,} datagrams per sender "
             "(TokenSender over AF_XDP, socket.sendto, sendmmsg) from the peer, counted at dut0")
    t = bench_tx.measure(lab, rounds=plan.tx_rounds, datagrams=plan.tx_datagrams,
                         progress=progress)
    return {
        "tx_mode": t["mode"],
        "tx_load": bench_tx.LOAD,
        "tx_datagrams": plan.tx_datagrams,
        "tx_sinks": t["sinks"],
        "tx_dps": {sink: {s: figure(v) for s, v in by.items()} for sink, by in t["dps"].items()},
        "tx_ratio": {sink: {k: figure(v) for k, v in by.items()}
                     for sink, by in t["ratio"].items()},
        "tx_lost": {sink: {s: figure(v) for s, v in by.items()} for sink, by in t["lost"].items()},
        "tx_cpu": t["cpu"],
        "tx_last_round": t["last_round"],
    }


def _forward(plan: Plan, progress: Progress) -> dict:
    progress(f"forwarding through a router: {plan.forward_rounds} rounds of three "
             f"{plan.xdp_window_s} s windows (XDP, kernel, kernel behind zerolayer's judge), "
             "generator flat out")
    lab_mod.sweep_stale()
    f = bench_forward.measure(rounds=plan.forward_rounds, settle_s=plan.xdp_settle_s,
                              window_s=plan.xdp_window_s, chunk=plan.xdp_chunk)
    return {
        "forward_mode": f["mode"],
        "forward_load": bench_forward.LOAD,
        "xdp_forward_dps": figure(f["xdp_dps"]),
        "kernel_forward_dps": figure(f["kernel_dps"]),
        "kernel_judged_forward_dps": figure(f["kernel_judged_dps"]),
        "forward_ratio": figure(f["ratio"]),
        "forward_judged_ratio": figure(f["judged_ratio"]),
        "forward_generator_pps": round(f["generator_pps"], 1),
        "forward_generator_sent": f["generator_sent"],
        "forward_received": f["received"],
        "forward_router_forwarded": f["router_forwarded"],
    }


def _core(plan: Plan, progress: Progress) -> dict:
    progress(f"per-batch cost: {plan.core_rounds} rounds of {plan.core_repeats} batches of "
             f"{', '.join(map(str, bench_core.SIZES))} datagrams per core "
             f"({' and '.join(bench_core.cores())}), receive and send, on synthetic rings")
    c = bench_core.measure(plan.core_rounds, plan.core_repeats)
    out: dict = {"load": bench_core.LOAD, "frames_per_datagram": bench_core.FRAMES,
                 "sizes": list(bench_core.SIZES), "cores": list(bench_core.cores())}
    for name in bench_core.cores():
        out[name] = {path: {"batch_ns": {n: figure(v) for n, v in r["batch_ns"].items()},
                            **{k: figure(r[k]) for k in ("fixed_ns", "per_datagram_ns",
                                                         "per_frame_ns")}}
                     for path, r in c[name].items()}
    if "speedup" in c:
        out["speedup"] = {path: {n: figure(v) for n, v in by.items()}
                          for path, by in c["speedup"].items()}
    return out


def targets(report: dict) -> list[dict]:
    """Each target and goal of the sections in REPORT, with the median
    measured against it; the relay's come from pyxdp.bench.relay."""
    out = []
    for t in TARGETS:
        fig = figure_of(report, t.key)
        if fig is None:
            continue  # its section did not run, or the figure was skipped (the C consumer)
        measured = fig["median"]
        met = measured <= t.bound if t.op == "<=" else measured >= t.bound
        out.append({"what": t.what, "kind": t.kind, "key": t.key, "bound": f"{t.op} {t.bound}",
                    "measured": measured, "met": met})
    if "relay" in report:
        out += bench_relay.targets(report["relay"], prefix="relay.")
    return out
