# SPDX-License-Identifier: Apache-2.0
"""The `forward` section of `zerolayer bench`. XDP forwarding against the
kernel's own IP forwarding: datagrams/s through a router, counted by
zerolayer on the receiver.

The routed lab (pyxdp/lab/routed_lab.py): the generator on the sender's
snd0 sends token datagrams for the receiver to the router's rtr0; the
receiver's rcv0 counts them in XDP and drops them
(pyxdp/bench/xdp_count.bpf.c), so its own stack is no part of what the router
is measured by. On rtr0, taking turns under the same load (the generator
runs flat out in a background thread the whole time):
- xdp: zerolayer with forwarding on: judged, routed by bpf_fib_lookup,
  redirected out of rtr1 through the egress devmap;
- kernel: the kernel's IP forwarding (ip_forward on in the router's
  namespace only) behind a program that only returns XDP_PASS, which is
  what a veth needs to take the generator's frames at all;
- kernel_judged: the kernel's forwarding behind zerolayer with forwarding
  off, which judges and counts every datagram as xdp does, then passes it.
The ratio that has the target is xdp against kernel: what a user gets over
turning ip_forward on. kernel_judged says how much of the difference is
the judging, which only zerolayer's side does.

Programs are swapped on rtr0 atomically (XDP_FLAGS_REPLACE), and forwarding
on or off is one write of zerolayer's config map, so the load never stops.
A rate is the receiver's counter growth while traffic flowed in a window,
after a short settling time (pyxdp.bench.xdp_path.flowing_rate). On veth,
the generator's, the router's and the receiver's work all run on the CPU
the generator runs on: a rate is the whole path's, of which the router's
part is what differs between the ways. The generator writes its template
over every frame (generator.Mix's rewrite): XDP forwarding changes the
frame in place, in a page the generator recycles.
"""

import os
import time
from typing import TYPE_CHECKING

from pyxdp.bench import xdp_path
from pyxdp.bench.drawing import FLOOR, ZEROLAYER, bar, ratio_note
from pyxdp.bench.figures import cells, figure
from pyxdp.bench.load_thread import flat_out
from pyxdp.bench.section import Progress, Rig, Section, Target, judged
from pyxdp.bench.xdp_path import MODE, flowing_rate, swap_program
from pyxdp.human import number, table

if TYPE_CHECKING:
    from pyxdp.bench.floors import CountProgram, PassProgram
    from pyxdp.lab.routed_lab import RoutedLab
    from pyxdp.xdp.testrun import TokenProgram

WAYS = ("xdp", "kernel", "kernel_judged")
FRAMES_PER_DATAGRAM = 4
PAYLOAD_SIZE = 16
LOAD = (f"IPv4 UDP datagrams of {FRAMES_PER_DATAGRAM} {PAYLOAD_SIZE}-byte TOKEN frames, "
        "sender -> router -> receiver")


def measure(*, rounds: int, settle_s: float, window_s: float, chunk: int) -> dict:
    """Per-round lists of datagrams/s by way, the ratios, and what the
    generator sent and the router and the receiver counted."""
    # scapy, libbpf and the labs: only when the section runs
    from pyxdp.bench.floors import CountProgram, PassProgram
    from pyxdp.lab import generator
    from pyxdp.lab.routed_lab import RoutedLab
    from pyxdp.xdp import loader, netlink, pins
    from pyxdp.xdp.testrun import TokenProgram

    sink, floor = CountProgram("drop"), PassProgram()
    try:
        with RoutedLab(ipv6=False) as lab:  # nothing crosses it but the load
            ns_rtr, ns_rcv = lab.router_in.netns, lab.receiver.netns
            # The namespace goes with the lab, and the sink with it.
            netlink.set_program(netlink.query(lab.receiver.ifname, ns_rcv).ifindex,
                                sink.prog_fd, MODE, netns=ns_rcv)
            loader.attach(lab.router_in.ifname, mode=MODE, forward=True, netns=ns_rtr)
            try:
                router = TokenProgram(pin_dir=pins.pin_dir(lab.router_in.ifname, ns_rtr))
                try:
                    gen = generator.LiveGenerator(lab.sender.ifname, lab.sender.netns)
                    mix = generator.token_mix(lab.path, frames_per_datagram=FRAMES_PER_DATAGRAM,
                                              payload_sizes=(PAYLOAD_SIZE,), rewrite=True)
                    return _rounds(lab, sink, router, floor, gen, mix, rounds=rounds,
                                   settle_s=settle_s, window_s=window_s, chunk=chunk)
                finally:
                    router.close()
            finally:
                loader.detach(lab.router_in.ifname, ns_rtr)
    finally:
        sink.close()
        floor.close()


def _rounds(lab: "RoutedLab", sink: "CountProgram", router: "TokenProgram",
            floor: "PassProgram", gen, mix, *, rounds: int, settle_s: float, window_s: float,
            chunk: int) -> dict:
    from pyxdp.kernel import bpfsys
    from pyxdp.xdp import netlink

    ns = lab.router_in.netns
    state = netlink.query(lab.router_in.ifname, ns)
    assert state.prog_id is not None, "the bench attached zerolayer"
    # What attach put there: zerolayer's program, or libxdp's dispatcher with
    # it inside (ROUTER is a second load of it, for its maps).
    zerolayer_fd = bpfsys.prog_fd_by_id(state.prog_id)
    programs = {"xdp": zerolayer_fd, "kernel": floor.prog_fd, "kernel_judged": zerolayer_fd}
    attached = "xdp"

    def become(way: str) -> None:
        """Make rtr0 forward WAY's way: swap programs if need be (atomically,
        naming the one it replaces), then set zerolayer's forwarding flag."""
        nonlocal attached
        swap_program(state, programs[way], programs[attached], ns)
        router.maps.set_forward_enabled(way == "xdp")
        attached = way

    received = sink.packets

    out: dict[str, list[float]] = {f"{w}_dps": [] for w in WAYS}
    out["ratio"], out["judged_ratio"] = [], []
    router_before, received_before = router.maps.read_counters(), received()
    try:
        with flat_out(gen, mix, chunk) as load:
            for r in range(rounds):
                rates = {}
                order = WAYS if r % 2 == 0 else WAYS[::-1]  # no way always first
                for way in order:
                    become(way)
                    load.check()
                    time.sleep(settle_s)
                    rates[way] = flowing_rate(received, window_s)
                    load.check()  # a window without load is no measurement
                for w in WAYS:
                    out[f"{w}_dps"].append(rates[w])
                out["ratio"].append(rates["xdp"] / rates["kernel"] if rates["kernel"] else 0.0)
                out["judged_ratio"].append(
                    rates["xdp"] / rates["kernel_judged"] if rates["kernel_judged"] else 0.0)
    finally:
        become("xdp")
        os.close(zerolayer_fd)
    router_after = router.maps.read_counters()
    sent = load.result or 0  # None only if the load failed, which raised above
    return {**out, "mode": MODE, "generator_pps": sent / load.elapsed_s, "generator_sent": sent,
            "received": received() - received_before,
            "router_forwarded": router_after["forwarded"] - router_before["forwarded"]}


# The xdp section's plans: windows as long as its, under the same load.
FULL = xdp_path.FULL
QUICK = xdp_path.QUICK
FORWARDING = "forwarding through a router on veth, XDP against the kernel's IP forwarding"
TARGETS = [Target(FORWARDING, "forward_ratio", ">=", 2.0),
           Target(FORWARDING, "forward_ratio", ">=", 3.0, "goal")]


def _measure(plan: xdp_path.Plan, rig: Rig | None, progress: Progress) -> dict:
    from pyxdp.lab import veth_lab

    progress(f"forwarding through a router: {plan.rounds} rounds of three "
             f"{plan.window_s} s windows (XDP, kernel, kernel behind zerolayer's judge), "
             "generator flat out")
    veth_lab.sweep_stale()
    return measure(rounds=plan.rounds, settle_s=plan.settle_s, window_s=plan.window_s,
                   chunk=plan.chunk)


def _report(plan: xdp_path.Plan, f: dict) -> dict:
    return {
        "forward_mode": f["mode"],
        "forward_load": LOAD,
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


def _render(r: dict) -> str:
    return "\n".join([
        f"Forwarding through a router on veth, {r['forward_mode']} mode, datagrams/s counted "
        f"at the receiver ({r['forward_load']})",
        table(["ROUTER", "MEDIAN", "MIN", "MAX"], [
            ["zerolayer XDP forwarding", *cells(r["xdp_forward_dps"], "{:,.0f}")],
            ["kernel IP forwarding", *cells(r["kernel_forward_dps"], "{:,.0f}")],
            ["kernel, behind zerolayer's judge", *cells(r["kernel_judged_forward_dps"],
                                                        "{:,.0f}")],
            ["XDP / kernel", *cells(r["forward_ratio"], "{:.2f}x")],
            ["XDP / kernel behind the judge", *cells(r["forward_judged_ratio"], "{:.2f}x")],
        ]),
        f"generator: {r['forward_generator_pps']:,.0f} frames/s flat out; the receiver counted "
        f"{number(r['forward_received'])} of {number(r['forward_generator_sent'])} sent, "
        f"{number(r['forward_router_forwarded'])} of them forwarded by XDP"])


def _panel(ax, report):
    bar(ax, 0, report["xdp_forward_dps"], ZEROLAYER, None, 1e6)
    bar(ax, 1, report["kernel_forward_dps"], FLOOR, None, 1e6)
    bar(ax, 2, report["kernel_judged_forward_dps"], FLOOR, None, 1e6)
    ax.set_xticks([0, 1, 2], ["XDP forwarding", "kernel", "kernel behind\nthe judge"])
    ax.set_title(f"Forwarding through a router ({report['forward_mode']}), M datagrams/s",
                 fontsize=10)
    ratio_note(ax, report, "forward_ratio", "XDP / kernel: ")


SECTION = Section(
    name="forward", full=FULL, quick=QUICK, measure=_measure, report=_report, render=_render,
    panel=_panel, targets=lambda report: judged(TARGETS, report))
