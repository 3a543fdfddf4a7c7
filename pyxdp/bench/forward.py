# SPDX-License-Identifier: Apache-2.0
"""XDP forwarding against the kernel's own IP forwarding: datagrams/s
through a router, counted by zerolayer on the receiver.

The routed lab (pyxdp/lab/routed_lab.py): the generator on the sender's
snd0 sends token datagrams for the receiver to the router's rtr0; the
receiver's rcv0 counts them in XDP and drops them (bpf/xdp_count.c), so
its own stack is no part of what the router is measured by. On rtr0,
taking turns under the same load (the generator runs flat out in a
background thread the whole time):
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

import time

from pyxdp.bench.load_thread import flat_out
from pyxdp.bench.xdp_path import MODE, CountProgram, flowing_rate, swap_program
from pyxdp.lab import generator
from pyxdp.lab.routed_lab import RoutedLab
from pyxdp.xdp import loader, netlink, pins
from pyxdp.xdp.testrun import PassProgram, TokenProgram

WAYS = ("xdp", "kernel", "kernel_judged")
FRAMES_PER_DATAGRAM = 4
PAYLOAD_SIZE = 16
LOAD = (f"IPv4 UDP datagrams of {FRAMES_PER_DATAGRAM} {PAYLOAD_SIZE}-byte TOKEN frames, "
        "sender -> router -> receiver")


def measure(*, rounds: int, settle_s: float, window_s: float, chunk: int) -> dict:
    """Per-round lists of datagrams/s by way, the ratios, and what the
    generator sent and the router and the receiver counted."""
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
                gen = generator.LiveGenerator(lab.sender.ifname, lab.sender.netns)
                mix = generator.token_mix(lab.path, frames_per_datagram=FRAMES_PER_DATAGRAM,
                                          payload_sizes=(PAYLOAD_SIZE,), rewrite=True)
                return _rounds(lab, sink, router, floor, gen, mix, rounds=rounds,
                               settle_s=settle_s, window_s=window_s, chunk=chunk)
            finally:
                loader.detach(lab.router_in.ifname, ns_rtr)
    finally:
        sink.close()
        floor.close()


def _rounds(lab: RoutedLab, sink: CountProgram, router: TokenProgram, floor: PassProgram,
            gen, mix, *, rounds: int, settle_s: float, window_s: float, chunk: int) -> dict:
    ns = lab.router_in.netns
    state = netlink.query(lab.router_in.ifname, ns)
    programs = {"xdp": router.prog_fd, "kernel": floor.prog_fd, "kernel_judged": router.prog_fd}
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
    router_after = router.maps.read_counters()
    sent = load.result or 0  # None only if the load failed, which raised above
    return {**out, "mode": MODE, "generator_pps": sent / load.elapsed_s, "generator_sent": sent,
            "received": received() - received_before,
            "router_forwarded": router_after["forwarded"] - router_before["forwarded"]}
