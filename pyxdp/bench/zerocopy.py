# SPDX-License-Identifier: Apache-2.0
"""The `zerocopy` section of `zerolayer bench`: AF_XDP in zero-copy mode
against copy mode on the same two interfaces, side by side in one run,
receiving and sending. It needs a pair whose driver offers zero-copy
(`zerolayer bench --pair DUT,PEER --section zerocopy`); veth has none, and
there the section says so and measures nothing.

  rx: one-frame token datagrams sent by the peer's kernel (sendmmsg from a
      UDP socket) into pyxdp's AF_XDP socket on the dut, touch tier (every
      frame walked), bound zero-copy, then copy (the other order on odd
      rounds). Not the delivery section's generator: its live-frames test
      runs switch the kernel's XDP dispatcher while virtio_net runs it, and
      under qemu's TCG that oopsed the guest twice (int3 in
      bpf_dispatcher_xdp_func, Linux 7.3);
  tx: the tx section's TokenSender on the peer, bound zero-copy, then
      copy, counted at the dut by zerolayer, the dut's socket as the sink.

Each mode is read back from the kernel (XDP_OPTIONS) for every run: a
figure for "zerocopy" is of a socket the kernel says is zero-copy.
"""

import socket
from dataclasses import dataclass

from pyxdp.bench.drawing import FLOOR, ZEROLAYER, bar
from pyxdp.bench.figures import cells, figure
from pyxdp.bench.section import Progress, Rig, Section
from pyxdp.human import number, table
from pyxdp.proto.frames import DEFAULT_PORT

MODES = ("zerocopy", "copy")
DIRECTIONS = {"rx": "receive into pyxdp (touch tier), frames/s",
              "tx": "send with TokenSender, datagrams/s at the dut"}


@dataclass(frozen=True)
class Plan:
    rounds: int
    frames: int  # datagrams per run, each direction and mode


class _KernelLoad:
    """The rx load, as xsk_vs_udp.measure runs a generator: COUNT datagrams
    sent through the peer's UDP socket with sendmmsg."""

    def __init__(self, lab):
        from pyxdp.bench.tx.senders import MMSG_BATCH, payloads
        from pyxdp.bench.tx.sendmmsg import MmsgSender

        with lab.in_peer():
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.connect((lab.dut.ipv4, DEFAULT_PORT))
        self._mmsg = MmsgSender(self._sock, payloads(MMSG_BATCH))

    def run(self, mix, count: int) -> int:  # its own datagrams, not MIX's packets
        return self._mmsg.send(count)

    def close(self) -> None:
        self._sock.close()


def _unavailable(lab) -> str | None:
    """Why zero-copy cannot be measured on LAB's pair, or None: a zero-copy
    bind tried on the dut's queue 0 (receive) and the peer's (send)."""
    from pyxdp.errors import ZerolayerError
    from pyxdp.xsk.socket import XskSocket
    from pyxdp.xsk.tx import XskTxSocket

    try:
        XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, bind="zerocopy").close()
        XskTxSocket(lab.peer.ifname, 0, netns=lab.peer.netns, bind="zerocopy").close()
    except ZerolayerError as exc:
        return str(exc)
    return None


def _measure(plan: Plan, rig: Rig | None, progress: Progress) -> dict:
    assert rig is not None  # an on_lab section
    lab = rig.lab
    why = _unavailable(lab)
    if why:
        progress(f"zero-copy against copy: not measured: {why}")
        return {"skipped": why}
    # AF_XDP and numpy: only when this section runs
    from pyxdp.bench.delivery import xsk_vs_udp
    from pyxdp.bench.tx import senders

    progress(f"zero-copy against copy: {plan.rounds} rounds of {plan.frames:,} datagrams per "
             "direction and mode, received by pyxdp and sent by TokenSender")
    load, mix = _KernelLoad(lab), xsk_vs_udp.load(lab)
    cpus = xsk_vs_udp.cpu_pair()
    pool = senders.payloads()
    datagrams = [pool[i % len(pool)] for i in range(plan.frames)]
    rates: dict = {d: {m: [] for m in MODES} for d in DIRECTIONS}
    lost: dict = {d: {m: [] for m in MODES} for d in DIRECTIONS}
    seen: dict = {d: set() for d in DIRECTIONS}
    try:
        for r in range(plan.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for mode in order:
                run = xsk_vs_udp.measure(lab, load, mix, plan.frames, cpus,
                                         xsk_vs_udp.XskConsumer(lab, "touch", bind=mode))
                rates["rx"][mode].append(run["fps"])
                lost["rx"][mode].append(run["lost"]["total"])
                seen["rx"].add((mode, run["mode"]))
            sink = senders.Sink(lab, "xdp")
            try:
                for mode in order:
                    run = senders.run_one(lab, "tokensender", datagrams,
                                          cpus[0] if cpus else None, bind=mode)
                    rates["tx"][mode].append(run["dps"])
                    lost["tx"][mode].append(run["lost"])
                    seen["tx"].add((mode, run["mode"]))
            finally:
                sink.close()
    finally:
        load.close()
    wrong = sorted(f"{d}: asked {asked}, got {got}" for d in DIRECTIONS
                   for asked, got in seen[d] if asked != got)
    return {"skipped": None, "rates": rates, "lost": lost, "mode_mismatch": wrong,
            "ratio": {d: [z / c if c else 0.0 for z, c in zip(rates[d]["zerocopy"],
                                                              rates[d]["copy"])]
                      for d in DIRECTIONS}}


def _report(plan: Plan, m: dict) -> dict:
    out: dict = {"skipped": m["skipped"], "frames": plan.frames}
    if m["skipped"] is None:
        out |= {
            "rate": {d: {mode: figure(m["rates"][d][mode]) for mode in MODES} for d in DIRECTIONS},
            "lost": {d: {mode: figure(m["lost"][d][mode]) for mode in MODES} for d in DIRECTIONS},
            "ratio": {d: figure(m["ratio"][d]) for d in DIRECTIONS},
            "mode_mismatch": m["mode_mismatch"],
        }
    return {"zerocopy": out}


def _render(r: dict) -> str:
    z = r["zerocopy"]
    title = "AF_XDP zero-copy against copy mode, on the same interfaces"
    if z["skipped"]:
        return f"{title}: not measured: {z['skipped']}"
    rows = []
    for d in DIRECTIONS:
        for mode in MODES:
            rows.append([d, f"{mode} mode", *cells(z["rate"][d][mode], "{:,.0f}"),
                         number(z["lost"][d][mode]["median"])])
        rows.append([d, "zero-copy / copy", *cells(z["ratio"][d], "{:.2f}x"), ""])
    out = [f"{title} ({number(z['frames'])} datagrams per direction, mode and round)",
           table(["DIRECTION", "", "MEDIAN", "MIN", "MAX", "LOST (MEDIAN)"], rows)]
    out += [f"   {d}: {about}" for d, about in DIRECTIONS.items()]
    return "\n".join(out)


def _panel(ax, report):
    z = report["zerocopy"]
    if z["skipped"]:
        ax.set_title("zero-copy against copy: not measured", fontsize=10)
        return
    for i, d in enumerate(DIRECTIONS):
        bar(ax, i - 0.2, z["rate"][d]["zerocopy"], ZEROLAYER, "zero-copy" if i == 0 else None,
            1e6)
        bar(ax, i + 0.2, z["rate"][d]["copy"], FLOOR, "copy" if i == 0 else None, 1e6)
    ax.set_xticks(range(len(DIRECTIONS)), list(DIRECTIONS))
    ax.set_title("AF_XDP zero-copy against copy, M per s", fontsize=10)
    ax.legend(fontsize=7)


def _errors(report: dict) -> list[str]:
    """A socket asked for one mode that ran in another: its figure is not of the mode named."""
    return list(report["zerocopy"].get("mode_mismatch") or [])


SECTION = Section(
    name="zerocopy", full=Plan(rounds=5, frames=200_000), quick=Plan(rounds=2, frames=20_000),
    measure=_measure, report=_report, render=_render, panel=_panel,
    targets=lambda report: [], errors=_errors, default=False, on_lab=True)
