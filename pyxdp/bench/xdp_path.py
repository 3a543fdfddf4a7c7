# SPDX-License-Identifier: Apache-2.0
"""The `xdp` section of `zerolayer bench`. XDP path throughput on veth:
datagrams/s that zerolayer's program counts on the lab's dut0, against a
program that only counts and passes (pyxdp.bench.floors.CountProgram),
under the same generator load from the peer.

The generator runs flat out in a background thread for the whole
measurement while the two programs take turns on dut0, swapped atomically
(XDP_FLAGS_REPLACE), so no frame goes uncounted and each round compares
two windows next to each other in time: on a shared machine that is what
keeps the ratio honest. A rate is a counter's growth over a window after a
short settling time, as xdp-bench reports it. Both programs pass what they
see to the kernel (zerolayer has no AF_XDP socket here), so the ratio is
what zerolayer's parsing costs on a path that is otherwise the same.

On veth the generator and dut0's receive work share the sending CPU, so
the rate is that of the whole path. The generator's rate and the frames
dut0 saw are reported too: if dut0 saw fewer than were sent, the veth ring
overflowed and the receiver, not the generator, set the pace.
"""

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyxdp.bench.drawing import FLOOR, ZEROLAYER, bar, ratio_note
from pyxdp.bench.figures import cells, figure
from pyxdp.bench.load_thread import flat_out
from pyxdp.bench.section import Progress, Rig, Section, Target, judged
from pyxdp.errors import ZerolayerError
from pyxdp.human import number, table

if TYPE_CHECKING:
    from pyxdp.bench.floors import CountProgram
    from pyxdp.xdp.netlink import XdpState

MODE = "native"
CHUNK = 2_000_000  # frames per generator call: about 1 s flat out into zerolayer here
QUICK_CHUNK = 50_000
TICK_S = 0.005  # how often a window samples its counter



def swap_program(state: "XdpState", prog_fd: int, running_fd: int,
                 netns: str | None) -> None:
    """Atomically replace RUNNING_FD's program on STATE's interface with
    PROG_FD's (XDP_FLAGS_REPLACE: the load never meets a bare interface)."""
    from pyxdp.xdp import netlink  # pyroute2: only when a section runs

    if prog_fd == running_fd:
        return
    try:
        netlink.set_program(state.ifindex, prog_fd, MODE, expected_fd=running_fd, netns=netns)
    except OSError as exc:
        raise ZerolayerError(f"swapping benchmark programs on {state.ifname} failed: "
                             f"{exc.strerror}") from None


def flowing_rate(count, window_s: float) -> float:
    """Counted per second while traffic flowed, over WINDOW_S: the counter
    is sampled every TICK_S and ticks where it did not move are left out.
    Between two generator calls the kernel waits tens of ms for RCU and
    sends nothing; counting those gaps would make a window's rate depend on
    whether one fell into it."""
    counted = flowing = 0.0
    prev_c, prev_t = count(), time.monotonic()
    end = prev_t + window_s
    while prev_t < end:
        time.sleep(TICK_S)
        c, t = count(), time.monotonic()
        if c > prev_c:
            counted += c - prev_c
            flowing += t - prev_t
        prev_c, prev_t = c, t
    return counted / flowing if flowing else 0.0


def measure(lab, token_program, count_program: "CountProgram", gen, mix, *, rounds: int,
            settle_s: float, window_s: float, chunk: int = CHUNK) -> dict:
    """Per-round lists of zerolayer_dps, pass_counter_dps and their ratio,
    plus the generator's rate and the share of its frames that dut0 saw."""
    from pyxdp.kernel import bpfsys
    from pyxdp.xdp import netlink

    state = netlink.query(lab.dut.ifname, lab.dut.netns)
    assert state.prog_id is not None, "the bench attached zerolayer"
    # What attach put there: zerolayer's program, or libxdp's dispatcher with
    # it inside, which is then part of what is measured.
    attached_fd = bpfsys.prog_fd_by_id(state.prog_id)
    contenders = {
        "zerolayer": (attached_fd, lambda: token_program.maps.read_counters()["packets"]),
        "pass_counter": (count_program.prog_fd, count_program.packets),
    }
    out: dict[str, list[float]] = {"zerolayer_dps": [], "pass_counter_dps": [], "ratio": []}
    before = {name: count() for name, (_, count) in contenders.items()}
    attached = "zerolayer"  # the bench attached it; it is left attached at the end

    def swap_to(name: str) -> None:
        nonlocal attached
        swap_program(state, contenders[name][0], contenders[attached][0], lab.dut.netns)
        attached = name

    names = list(contenders)
    try:
        with flat_out(gen, mix, chunk) as load:
            for r in range(rounds):
                rates = {}
                for name in (names if r % 2 == 0 else names[::-1]):  # neither always first
                    swap_to(name)
                    count = contenders[name][1]
                    time.sleep(settle_s)
                    rates[name] = flowing_rate(count, window_s)
                    load.check()  # a window without load is no measurement
                out["zerolayer_dps"].append(rates["zerolayer"])
                out["pass_counter_dps"].append(rates["pass_counter"])
                out["ratio"].append(rates["zerolayer"] / rates["pass_counter"]
                                    if rates["pass_counter"] else 0.0)
    finally:
        swap_to("zerolayer")
        os.close(attached_fd)
    # One program was attached at any moment (swaps are atomic), so together
    # they saw every frame that reached dut0.
    seen = sum(count() - before[name] for name, (_, count) in contenders.items())
    sent = load.result or 0  # None only if the load failed, which raised above
    return {**out, "mode": MODE, "generator_pps": sent / load.elapsed_s,
            "generator_sent": sent, "seen_by_dut": seen}


@dataclass(frozen=True)
class Plan:
    rounds: int
    settle_s: float
    window_s: float
    chunk: int


FULL = Plan(rounds=10, settle_s=0.05, window_s=0.3, chunk=CHUNK)
QUICK = Plan(rounds=2, settle_s=0.02, window_s=0.1, chunk=QUICK_CHUNK)
TARGETS = [Target("XDP path throughput on veth, against a count-and-pass program", "xdp_ratio",
                  ">=", 0.9)]


def _counter():
    from pyxdp.bench.floors import CountProgram

    return CountProgram()


def _measure(plan: Plan, rig: Rig | None, progress: Progress) -> dict:
    from pyxdp.bench.parser import packet
    from pyxdp.lab import generator

    assert rig is not None  # an on_lab section
    progress(f"XDP path on veth: {plan.rounds} rounds of two {plan.window_s} s "
             "windows, generator flat out")
    load = generator.Mix.single(packet(rig.lab, 4))
    return measure(rig.lab, rig.token, rig.prepared, rig.generator, load, rounds=plan.rounds,
                   settle_s=plan.settle_s, window_s=plan.window_s, chunk=plan.chunk)


def _report(plan: Plan, xdp: dict) -> dict:
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


def _render(r: dict) -> str:
    return "\n".join([
        f"XDP path on veth, {r['xdp_mode']} mode, datagrams/s counted on dut0 ({r['xdp_load']})",
        table(["PROGRAM", "MEDIAN", "MIN", "MAX"], [
            ["zerolayer", *cells(r["zerolayer_dps"], "{:,.0f}")],
            ["count-and-pass", *cells(r["pass_counter_dps"], "{:,.0f}")],
            ["ratio", *cells(r["xdp_ratio"], "{:.2f}x")],
        ]),
        f"generator: {r['generator_pps']:,.0f} frames/s flat out; dut0 saw "
        f"{number(r['seen_by_dut'])} of {number(r['generator_sent'])} frames sent"])


def _panel(ax, report):
    bar(ax, 0, report["zerolayer_dps"], ZEROLAYER, None, 1e6)
    bar(ax, 1, report["pass_counter_dps"], FLOOR, None, 1e6)
    ax.set_xticks([0, 1], ["zerolayer", "count-and-pass"])
    ax.set_title(f"XDP path on veth ({report['xdp_mode']}), M datagrams/s", fontsize=10)
    ratio_note(ax, report, "xdp_ratio", "ratio: ")


SECTION = Section(
    name="xdp", full=FULL, quick=QUICK, measure=_measure, report=_report, render=_render,
    panel=_panel, targets=lambda report: judged(TARGETS, report), on_lab=True,
    needs_generator=True, compiles="count-and-pass", prepare=_counter)
