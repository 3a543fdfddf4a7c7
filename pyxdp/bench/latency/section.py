# SPDX-License-Identifier: Apache-2.0
"""The `latency` section of `zerolayer bench`: one-way latency at token
cadence, from the sender's CLOCK_MONOTONIC stamp inside each token frame
to the moment the consumer's code holds the frame, on the bench's lab
(veth, or --pair's NICs) with zerolayer attached to dut0.

Loads (LOADS): 1 stream at 50 frames/s, and 1,000 streams at 50 frames/s
each (50,000 frames/s, the streams' phases spread evenly), sent by a paced
C sender in the peer namespace (pyxdp/bench/latency/sender.py). Paths, side
by side in each round, the order reversed every other round: pyxdp's
AF_XDP socket with and without preferred busy polling and in an asyncio
program, and a blocking UDP socket with and without SO_BUSY_POLL
(pyxdp/bench/latency/consumer.py).
Every figure is the median over rounds of a round's percentile; ratios are
taken within a round. What each run sent and received is checked: a lost
frame misses a target.
"""

import math
from dataclasses import dataclass

from pyxdp.bench import c_build
from pyxdp.bench.drawing import C_CEILING, FLOOR, ZEROLAYER, bar, verdicts
from pyxdp.bench.figures import figure, figure_of
from pyxdp.bench.latency import PATHS, on_time
from pyxdp.bench.latency.sender import SOURCE
from pyxdp.bench.section import Progress, Rig, Section, Target, judged
from pyxdp.human import number, table

LATENCIES = ("p50_us", "p99_us", "p999_us", "max_us")
# Per-round p99 ratios: name -> (path over, path under).
RATIOS = {"af_xdp_vs_udp_p99": ("af_xdp", "udp"),
          "busy_poll_vs_af_xdp_p99": ("af_xdp_busy_poll", "af_xdp"),
          "udp_busy_poll_vs_udp_p99": ("udp_busy_poll", "udp"),
          "asyncio_vs_af_xdp_p99": ("af_xdp_asyncio", "af_xdp")}
DATAGRAM = ("IPv4 UDP datagrams of one TOKEN frame, its 16-byte payload the stamp (u64 ns), "
            "the stream and the frame's number; a UDP socket (source port) per stream")
SCOPE_NOTE = ("measured on the bench's lab: a veth pair, or with --pair two NICs (the VM rig's "
              "virtio_net pair runs it in tests/test_nic_bench.py, which checks what it "
              "reports, not its times: under emulation they are the emulator's)")


@dataclass(frozen=True)
class Load:
    name: str
    streams: int
    rate: int  # frames/s of each stream
    seconds: float

    @property
    def frames(self) -> int:
        """What the sender sends (paced_sender.c's total)."""
        return int(self.seconds * self.rate) * self.streams


@dataclass(frozen=True)
class Plan:
    rounds: int
    loads: tuple[Load, ...]


# p99.9 needs frames: 1,500 a round at 1x50 (the second slowest), 250,000 at 1000x50.
FULL = Plan(rounds=3, loads=(Load("1x50", 1, 50, 30.0), Load("1000x50", 1000, 50, 5.0)))
QUICK = Plan(rounds=1, loads=(Load("1x50", 1, 50, 2.0), Load("1000x50", 1000, 50, 1.0)))

TARGETS = [
    Target("p99 latency at 1,000 streams x 50 frames/s, af_xdp against udp",
           "latency_ratio.af_xdp_vs_udp_p99.1000x50", "<=", 1.0),
    Target("p99 latency at 1,000 streams x 50 frames/s, af_xdp against udp",
           "latency_ratio.af_xdp_vs_udp_p99.1000x50", "<=", 0.5, "goal"),
    Target("p99 latency at 1 stream x 50 frames/s, af_xdp_busy_poll against af_xdp",
           "latency_ratio.busy_poll_vs_af_xdp_p99.1x50", "<=", 0.8),
    Target("frames lost, every path and load (median of rounds)", "latency_lost", "<=", 0,
           unit=" frames"),
]


def _measure(plan: Plan, rig: Rig | None, progress: Progress) -> dict:
    from pyxdp.bench.latency import measure  # AF_XDP, numpy: only when this section runs

    assert rig is not None  # an on_lab section
    progress(f"latency: {plan.rounds} round{'s' if plan.rounds > 1 else ''} of "
             + ", ".join(f"{ld.name} for {ld.seconds:g} s" for ld in plan.loads)
             + f" per path ({', '.join(PATHS)})")
    return measure.measure(rig.lab, plan, progress)


def _runs(measured: dict, path: str, load: str) -> list[dict]:
    return [r for r in measured["runs"] if r["path"] == path and r["load"] == load]


def _ratios(measured: dict, load: str, bound: float | None = None) -> dict[str, dict | None]:
    """Each of RATIOS at LOAD within rounds; with BOUND, over the rounds
    whose senders were on time (pyxdp/bench/latency/on_time.py)."""
    return {name: on_time.ratio(_runs(measured, over, load), _runs(measured, under, load),
                                bound=bound)
            for name, (over, under) in RATIOS.items()}


def _ratios_on_time(measured: dict, load: str) -> dict[str, dict | None]:
    every = [r for r in measured["runs"] if r["load"] == load]
    return _ratios(measured, load, on_time.bound_us(every))


def _notes(plan: Plan, measured: dict) -> list[str]:
    notes = [SCOPE_NOTE]
    for load in plan.loads:
        every = [r for r in measured["runs"] if r["load"] == load.name]
        if every:
            notes.append(f"{load.name}: {on_time.late_note(every, 'latency_ratio_on_time')}")
    for load in plan.loads:
        slower = load.frames - math.ceil(0.999 * load.frames - 1e-9)  # stats.percentiles' rank
        notes.append(f"{load.name}: p99.9 is read from {number(load.frames)} frames a round: "
                     + ("it is the max" if not slower else
                        f"{slower:,} frame{'s were' if slower > 1 else ' was'} slower"))
    for r in measured["runs"]:
        if r["lost"]:
            st = r["consumer"]["socket"].get("statistics")
            why = (f" (rx_ring_full {st['rx_ring_full']:,}, fill ring empty "
                   f"{st['rx_fill_ring_empty_descs']:,})" if st else
                   f" (UDP socket buffer full {r['udp_rcvbuf_errors']:,})")
            notes.append(f"round {r['round'] + 1}, {r['load']}, {r['path']}: {r['lost']:,} of "
                         f"{r['sent']:,} frames lost{why}")
    for path in PATHS:
        runs = [r for r in measured["runs"] if r["path"] == path]
        said = {n for r in runs for n in r["consumer"]["socket"].get("notes", [])}
        notes += [f"{path}: {n}" for n in sorted(said)]
        if path.endswith("busy_poll") and runs and not any(r["busy_poll_rx_packets"]
                                                           for r in runs):
            notes.append(f"{path}: the kernel received no frame by busy polling "
                         "(the dut's BusyPollRxPackets did not move)")
    return notes


def _report(plan: Plan, measured: dict) -> dict:
    latency: dict = {}
    for path in PATHS:
        for load in plan.loads:
            runs = _runs(measured, path, load.name)
            if not runs:
                continue
            cpu = [r["cpu_per_frame_us"] for r in runs if r["cpu_per_frame_us"] is not None]
            latency.setdefault(path, {})[load.name] = {
                **{key: figure(r[key] for r in runs) for key in LATENCIES},
                "sent": sum(r["sent"] for r in runs),
                "received": sum(r["received"] for r in runs),
                "cpu_per_frame_us": figure(cpu) if cpu else None}
    lost = [sum(r["lost"] for r in measured["runs"] if r["round"] == i)
            for i in range(plan.rounds)]
    on_time_by_load = {ld.name: _ratios_on_time(measured, ld.name) for ld in plan.loads}

    return {
        "latency": latency,
        "latency_ratio": {name: by for name in RATIOS
                          if (by := {ld.name: fig for ld in plan.loads
                                     if (fig := _ratios(measured, ld.name)[name])})},
        "latency_ratio_on_time": {name: {ld: by[name] for ld, by in on_time_by_load.items()}
                                  for name in RATIOS},
        "latency_lost": figure(lost),
        "latency_load": {
            "loads": {ld.name: {"streams": ld.streams, "frames_per_s_per_stream": ld.rate,
                                "frames_per_s": ld.streams * ld.rate, "seconds": ld.seconds,
                                "frames": ld.frames} for ld in plan.loads},
            "rounds": plan.rounds, "datagram": DATAGRAM,
            "sender": {"source": SOURCE.name, "command": c_build.command(SOURCE),
                       "compiler": measured["compiler"]},
            "cpus": measured["cpus"]},
        "latency_runs": measured["runs"],
        "latency_notes": _notes(plan, measured),
    }


def _render(r: dict) -> str:
    load = r["latency_load"]
    rows = []
    for name in load["loads"]:
        for path, by in r["latency"].items():
            f = by.get(name)
            if f is None:
                continue
            cpu = f["cpu_per_frame_us"]
            rows.append([name, path, *(f"{f[k]['median']:,.1f}" for k in LATENCIES),
                         f"{cpu['median']:,.1f}" if cpu else "", number(f["sent"]),
                         number(f["received"])])
        for ratio, (over, under) in RATIOS.items():
            fig = r["latency_ratio"].get(ratio, {}).get(name)
            quiet = r["latency_ratio_on_time"][ratio][name]
            if fig is not None:
                rows.append([name, f"{over} / {under}", "", f"{fig['median']:.2f}x", "", "", "",
                             "", ""])
            if quiet is not None:
                rows.append([name, f"  sender on time ({quiet['rounds']})", "",
                             f"{quiet['median']:.2f}x", "", "", "", "", ""])
    out = [f"One-way latency at token cadence, us, sender's stamp to the consumer's read "
           f"({load['rounds']} round{'s' if load['rounds'] > 1 else ''}; {load['datagram']})",
           table(["LOAD", "PATH", "P50", "P99", "P99.9", "MAX", "CPU/FRAME", "SENT", "RECEIVED"],
                 rows)]
    for name, ld in load["loads"].items():
        runs = [x for x in r["latency_runs"] if x["load"] == name]
        late = max(x["sender"]["late_p99_us"] for x in runs)
        pace = min(x["sender"]["frames_per_s"] for x in runs)
        out.append(f"   sender, {name}: {number(ld['frames'])} frames a run in {ld['seconds']:g} s; "
                   f"slowest run {pace:,.0f} frames/s of {number(ld['frames_per_s'])}, "
                   f"p99 lateness at most {late:,.0f} us")
    out.append("   CPU/FRAME: the consumer process's CPU (user + system) per frame, us")
    out += [f"   note: {n}" for n in r["latency_notes"]]
    return "\n".join(out)


def _panel(ax, report):
    colors = {"af_xdp": ZEROLAYER, "af_xdp_busy_poll": C_CEILING, "af_xdp_asyncio": "#9467bd",
              "udp": FLOOR, "udp_busy_poll": "#7f7f7f"}
    loads = list(report["latency_load"]["loads"])
    width = 0.16
    for i, name in enumerate(loads):
        for j, path in enumerate(PATHS):
            fig = report["latency"].get(path, {}).get(name)
            if fig is not None:
                bar(ax, i + (j - (len(PATHS) - 1) / 2) * width, fig["p99_us"], colors[path],
                    path if i == 0 else None, 1.0, width)
    ax.set_xticks(range(len(loads)), loads)
    ax.set_title("One-way latency at token cadence, p99 us (lower is better)", fontsize=10)
    notes = []
    for key, text in (("latency_ratio.af_xdp_vs_udp_p99.1000x50", "1000x50, af_xdp/udp: "),
                      ("latency_ratio.busy_poll_vs_af_xdp_p99.1x50", "1x50, busy/af_xdp: ")):
        fig = figure_of(report, key)
        if fig is not None:
            notes.append(f"{text}{fig['median']:.2f}x; {verdicts(report, key)}")
    ax.set_xlabel("\n".join(notes), fontsize=8)
    ax.legend(fontsize=7)


SECTION = Section(
    name="latency", full=FULL, quick=QUICK, measure=_measure, report=_report, render=_render,
    panel=_panel, targets=lambda report: judged(TARGETS, report), default=False, on_lab=True)
