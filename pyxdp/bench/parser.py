# SPDX-License-Identifier: Apache-2.0
"""The `parser` section of `zerolayer bench`. Parser cost: ns per datagram
of zerolayer's program against a program that only returns XDP_PASS, both
through BPF_PROG_TEST_RUN on the same packet. Where the kernel has
multi-buffer XDP (5.18), also an 8,000-byte datagram of 32 frames, which a
test run hands both programs in three buffers (docs/spec.md §1.9): the
jumbo path's cost, against an XDP_PASS program loaded for multi-buffer.
Where zerolayer runs inside libxdp's dispatcher (docs/spec.md §6), the
4-frame datagram through the dispatcher against zerolayer's program alone:
what sharing the interface costs.

How it is timed, and why:
- The kernel's own `duration` is a whole number of ns per run: too coarse
  for programs that cost a few ns to a few tens of ns.
- Each BPF_PROG_TEST_RUN call with more than one repetition also swaps the
  XDP dispatcher and waits for RCU, tens of ms of wall time that vary from
  call to call. Subtracting it as a constant would put its noise into the
  result.
- So each figure is the least-squares slope of the calling thread's CPU
  time against the repetition count, over several counts (1M..4M). The
  slope cancels the fixed per-call work; CPU time leaves out the RCU wait
  (the thread sleeps through it) and any time another process held the CPU.
- The thread is pinned to one CPU for the whole measurement, and the two
  programs alternate within each round, so both see the same machine.
"""

import contextlib
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from pyxdp.bench.drawing import FLOOR, ZEROLAYER, bar, ratio_note
from pyxdp.bench.figures import cells, figure
from pyxdp.bench.section import Progress, Rig, Section, Target, judged
from pyxdp.errors import ZerolayerError
from pyxdp.human import table
from pyxdp.kernel import bpfsys

FRAME_COUNTS = (1, 4, 16)
TOKEN_PAYLOAD = 16  # bytes per TOKEN frame: a token or two of text
REPEATS = (1_000_000, 2_000_000, 3_000_000, 4_000_000)
# Quick runs still need the slope well above the per-call noise (hundreds of
# us of CPU on a busy host): at 100k a step, a 30 ns floor once came out -3.6.
QUICK_REPEATS = (400_000, 800_000, 1_200_000, 1_600_000)
# The jumbo datagram: 32 TOKEN frames of 245 bytes, 8,000 bytes of UDP
# payload. It costs microseconds, not nanoseconds: a tenth of the repetitions.
JUMBO_FRAMES, JUMBO_TOKEN_PAYLOAD = 32, 245
JUMBO_SHARE = 10


def packet(route, frames_per_datagram: int) -> bytes:
    """An IPv4 token datagram with FRAMES_PER_DATAGRAM 16-byte TOKEN frames."""
    from pyxdp.lab import generator, traffic  # scapy: only when a section runs

    payload = generator.token_payload(frames_per_datagram, TOKEN_PAYLOAD)
    return bytes(traffic.udp_packet(route, payload, sport=40000))


def jumbo_packet(route) -> bytes:
    from pyxdp.lab import generator, traffic

    payload = generator.token_payload(JUMBO_FRAMES, JUMBO_TOKEN_PAYLOAD)
    return bytes(traffic.udp_packet(route, payload, sport=40000))


def ns_per_run(prog_fd: int, data: bytes, repeats) -> float:
    """The slope of thread CPU time over REPEATS repetitions: ns per run."""
    spent = []
    for n in repeats:
        t0 = time.thread_time_ns()
        bpfsys.prog_test_run(prog_fd, data, repeat=n, out_size=0)
        spent.append(time.thread_time_ns() - t0)
    return statistics.linear_regression(repeats, spent).slope


@contextlib.contextmanager
def pinned_to_one_cpu():
    """Run the block on one CPU (the highest this thread may use)."""
    before = os.sched_getaffinity(0)
    cpu = max(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


def _checked(token_program, data: bytes, frames: int) -> bytes:
    outcome = token_program.run(data)
    if outcome.counters["token_datagrams"] != 1 or outcome.counters["frames.token"] != frames:
        raise ZerolayerError(f"the {frames}-frame benchmark packet is not judged a token datagram")
    return data


def dispatcher_fd(route) -> int | None:
    """An fd of libxdp's dispatcher on ROUTE's dut, when zerolayer runs in
    one; the caller closes it."""
    from pyxdp.xdp import ownership

    ins = ownership.inspect(route.dut.ifname, route.dut.netns)
    if ins.dispatcher is None or ins.state.prog_id is None:
        return None
    return bpfsys.prog_fd_by_id(ins.state.prog_id)


@dataclass
class _Program:
    prog_fd: int


def measure(token_program, floors: "Floors", route, *, rounds: int, repeats=REPEATS) -> dict:
    """Per frame count (and "jumbo", where the kernel has multi-buffer XDP):
    per-round lists of parser_ns, pass_floor_ns and their ratio, plus the
    CPU the runs were pinned to. Inside a dispatcher, "dispatcher": the
    4-frame datagram through it, its "floor" zerolayer's program alone."""
    # case: (packet, the program measured, its floor, repetition counts)
    cases = {str(n): (_checked(token_program, packet(route, n), n), token_program,
                      floors.single, repeats) for n in FRAME_COUNTS}
    if floors.frags is not None:
        cases["jumbo"] = (_checked(token_program, jumbo_packet(route), JUMBO_FRAMES),
                          token_program, floors.frags, tuple(n // JUMBO_SHARE for n in repeats))
    disp_fd = dispatcher_fd(route)
    if disp_fd is not None:
        cases["dispatcher"] = (cases["4"][0], _Program(disp_fd), token_program, repeats)
    try:
        return _timed(cases, rounds)
    finally:
        if disp_fd is not None:
            os.close(disp_fd)


def _timed(cases: dict, rounds: int) -> dict:
    results: dict[str, dict[str, list[float]]] = {
        case: {"parser_ns": [], "pass_floor_ns": [], "ratio": []} for case in cases}
    with pinned_to_one_cpu() as cpu:
        for r in range(rounds):
            for case, (data, measured, floor_program, counts) in cases.items():
                order = [measured, floor_program]
                if r % 2:
                    order.reverse()  # neither program always goes first
                timed = {id(p): ns_per_run(p.prog_fd, data, counts) for p in order}
                cost, floor = timed[id(measured)], timed[id(floor_program)]
                results[case]["parser_ns"].append(cost)
                results[case]["pass_floor_ns"].append(floor)
                results[case]["ratio"].append(cost / floor)
    return {"cpu": cpu, "by_frames": results}


@dataclass(frozen=True)
class Plan:
    rounds: int
    repeats: tuple[int, ...]


# No target: the parser is judged on the path (the XDP section, checksums
# on). Of its cost here the UDP checksum its integrity needs is 11-13 ns,
# so a ratio to a program that reads nothing says little (docs/spec.md §8.2).
TARGETS: list[Target] = []


@dataclass
class Floors:
    single: Any  # XDP_PASS, as clang builds it
    frags: Any  # XDP_PASS for packets in several buffers; None before 5.18


def _floor() -> Floors:
    from pyxdp.bench.floors import FragsPassProgram, PassProgram
    from pyxdp.xdp import parsers

    frags = FragsPassProgram() if parsers.for_this_kernel() == parsers.FULL else None
    return Floors(PassProgram(), frags)


def _measure(plan: Plan, rig: Rig | None, progress: Progress) -> dict:
    assert rig is not None  # an on_lab section
    progress(f"parser cost: {plan.rounds} rounds, BPF_PROG_TEST_RUN, "
             f"{plan.repeats[0]:,}..{plan.repeats[-1]:,} repetitions")
    return measure(rig.token, rig.prepared, rig.lab, rounds=plan.rounds, repeats=plan.repeats)


def _report(plan: Plan, parser: dict) -> dict:
    by = parser["by_frames"]
    return {
        "parser_ns": {n: figure(r["parser_ns"]) for n, r in by.items()},
        "pass_floor_ns": {n: figure(r["pass_floor_ns"]) for n, r in by.items()},
        "parser_ratio": {n: figure(r["ratio"]) for n, r in by.items()},
        "parser_method": (
            f"slope of thread CPU time over {len(plan.repeats)} repetition counts "
            f"({plan.repeats[0]:,}..{plan.repeats[-1]:,}; a tenth for jumbo), pinned to CPU "
            f"{parser['cpu']}; IPv4 UDP datagrams of N 16-byte TOKEN frames; jumbo: "
            f"{JUMBO_FRAMES} frames of {JUMBO_TOKEN_PAYLOAD} bytes (8,000 bytes of payload) in "
            "three buffers, against XDP_PASS loaded for multi-buffer"
            + ("" if "jumbo" in by else " (not run: this kernel lacks multi-buffer XDP)")
            + ("; dispatcher: 4 frames through libxdp's dispatcher, against zerolayer's "
               "program alone" if "dispatcher" in by else
               "; dispatcher: not run, zerolayer runs alone on this interface")
        ),
    }


def _render(r: dict) -> str:
    rows = []
    for n in r["parser_ns"]:
        rows.append([n, *cells(r["parser_ns"][n]), *cells(r["pass_floor_ns"][n]),
                     *cells(r["parser_ratio"][n], "{:.2f}x")])
    lines = ["Parser cost, ns per datagram, BPF_PROG_TEST_RUN",
             f"   ({r['parser_method']})",
             table(["FRAMES", "ZEROLAYER", "MIN", "MAX", "XDP_PASS", "MIN", "MAX",
                    "RATIO", "MIN", "MAX"], rows)]
    if "dispatcher" in r["parser_ns"]:
        lines.append("   (dispatcher row: zerolayer through libxdp's dispatcher, against "
                     "zerolayer's program alone in the XDP_PASS columns)")
    return "\n".join(lines)


def _panel(ax, report):
    # frame counts only: jumbo costs microseconds, the dispatcher has another floor
    counts = [n for n in report["parser_ns"] if n.isdigit()]
    for i, n in enumerate(counts):
        bar(ax, i - 0.2, report["parser_ns"][n], ZEROLAYER, "zerolayer" if i == 0 else None)
        bar(ax, i + 0.2, report["pass_floor_ns"][n], FLOOR, "XDP_PASS floor" if i == 0 else None)
    ax.set_xticks(range(len(counts)), [f"{n} frame{'s' if n != '1' else ''}" for n in counts])
    ax.set_title("Parser cost, ns per datagram (lower is better)", fontsize=10)
    ratio_note(ax, report, "parser_ratio.4", "ratio at 4 frames: ")
    ax.legend(fontsize=8)


SECTION = Section(
    name="parser", full=Plan(rounds=5, repeats=REPEATS),
    quick=Plan(rounds=2, repeats=QUICK_REPEATS), measure=_measure, report=_report,
    render=_render, panel=_panel, targets=lambda report: judged(TARGETS, report),
    on_lab=True, compiles="XDP_PASS floor", prepare=_floor)
