# SPDX-License-Identifier: Apache-2.0
"""XDP path throughput on veth: datagrams/s that zerolayer's program counts
on the lab's dut0, against a program that only counts and passes
(bpf/xdp_count.c), under the same generator load from the peer.

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

import time

from pyxdp.bench.load_thread import flat_out
from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys
from pyxdp.proto import counters
from pyxdp.xdp import compiler, netlink

MODE = "native"
CHUNK = 2_000_000  # frames per generator call: about 1 s flat out into zerolayer here
QUICK_CHUNK = 50_000
TICK_S = 0.005  # how often a window samples its counter


COUNT_SOURCE = "xdp_count.c"
COUNT_MAPS = {"count": "zl_count"}


class CountProgram:
    """bpf/xdp_count.c: counts every packet and passes it (or, as
    VERDICT="drop", drops it)."""

    def __init__(self, verdict: str = "pass"):
        self._loaded = compiler.load(COUNT_SOURCE, f"xdp_count_{verdict}", maps=COUNT_MAPS)
        self.prog_fd = self._loaded.prog_fd
        self._map_fd = self._loaded.map_fds["count"]

    def packets(self) -> int:
        ncpus = bpfsys.possible_cpus()
        raw = bpfsys.map_lookup(self._map_fd, bytes(4), 8 * ncpus)
        if raw is None:  # an array's entry 0 is always there
            raise ZerolayerError("the count-and-pass program's counter map has no entry 0")
        return counters.from_percpu(raw, ncpus, fields=("packets",))["packets"]

    def close(self) -> None:
        self._loaded.close()


def swap_program(state: netlink.XdpState, prog_fd: int, running_fd: int,
                 netns: str | None) -> None:
    """Atomically replace RUNNING_FD's program on STATE's interface with
    PROG_FD's (XDP_FLAGS_REPLACE: the load never meets a bare interface)."""
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


def measure(lab, token_program, count_program: CountProgram, gen, mix, *, rounds: int,
            settle_s: float, window_s: float, chunk: int = CHUNK) -> dict:
    """Per-round lists of zerolayer_dps, pass_counter_dps and their ratio,
    plus the generator's rate and the share of its frames that dut0 saw."""
    state = netlink.query(lab.dut.ifname, lab.dut.netns)
    contenders = {
        "zerolayer": (token_program.prog_fd, lambda: token_program.maps.read_counters()["packets"]),
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
    # One program was attached at any moment (swaps are atomic), so together
    # they saw every frame that reached dut0.
    seen = sum(count() - before[name] for name, (_, count) in contenders.items())
    sent = load.result or 0  # None only if the load failed, which raised above
    return {**out, "mode": MODE, "generator_pps": sent / load.elapsed_s,
            "generator_sent": sent, "seen_by_dut": seen}
