# SPDX-License-Identifier: Apache-2.0
"""The `tx` section of `zerolayer bench`: sending, datagrams/s counted at
the lab's dut0, TokenSender (AF_XDP) against a socket.sendto loop and
sendmmsg(2), the same datagrams, with two things for dut0 to do with them
after XDP (pyxdp.bench.tx.senders says how it is measured)."""

from dataclasses import dataclass

from pyxdp.bench.drawing import C_CEILING, FLOOR, ZEROLAYER, bar, ratio_note
from pyxdp.bench.figures import cells, figure
from pyxdp.bench.section import Progress, Rig, Section, Target, judged
from pyxdp.human import number, table


@dataclass(frozen=True)
class Plan:
    rounds: int
    datagrams: int  # each sender sends per round


SENDING = "sending, datagrams/s at the receiver, TokenSender (AF_XDP) against socket.sendto"
TARGETS = [Target(SENDING, "tx_ratio.xdp.vs_sendto", ">=", 2.0),
           Target(SENDING, "tx_ratio.xdp.vs_sendto", ">=", 3.0, "goal")]


def _measure(plan: Plan, rig: Rig | None, progress: Progress) -> dict:
    from pyxdp.bench.tx import senders  # AF_XDP: only when this section runs

    assert rig is not None  # an on_lab section
    progress(f"sending: {plan.rounds} rounds of {plan.datagrams:,} datagrams per sender "
             "(TokenSender over AF_XDP, socket.sendto, sendmmsg) from the peer, counted at dut0")
    return senders.measure(rig.lab, rounds=plan.rounds, datagrams=plan.datagrams,
                           progress=progress)


def _report(plan: Plan, t: dict) -> dict:
    from pyxdp.bench.tx.senders import LOAD

    return {
        "tx_mode": t["mode"],
        "tx_load": LOAD,
        "tx_datagrams": plan.datagrams,
        "tx_sinks": t["sinks"],
        "tx_dps": {sink: {s: figure(v) for s, v in by.items()} for sink, by in t["dps"].items()},
        "tx_ratio": {sink: {k: figure(v) for k, v in by.items()}
                     for sink, by in t["ratio"].items()},
        "tx_lost": {sink: {s: figure(v) for s, v in by.items()} for sink, by in t["lost"].items()},
        "tx_cpu": t["cpu"],
        "tx_last_round": t["last_round"],
    }


def _render(r: dict) -> str:
    out = [f"Sending, datagrams/s counted at dut0 ({number(r['tx_datagrams'])} per sender and "
           f"round: {r['tx_load']}), senders pinned to CPU {r['tx_cpu']}"]
    for sink, about in r["tx_sinks"].items():
        runs = r["tx_last_round"][sink]["runs"]
        rows = []
        for name, fig in r["tx_dps"][sink].items():
            cpu = runs[name]["cpu"] or {}
            label = f"TokenSender (AF_XDP, {r['tx_mode']} mode)" if name == "tokensender" \
                else name
            rows.append([label, *cells(fig, "{:,.0f}"), number(r["tx_lost"][sink][name]["median"]),
                         f"{cpu.get('busy', 0):.0%} / {cpu.get('softirq', 0):.0%}"])
        for key, fig in r["tx_ratio"][sink].items():
            rows.append([f"TokenSender / {key.removeprefix('vs_')}", *cells(fig, "{:.2f}x"), "",
                         ""])
        out += [f"sink {sink}: {about['work']}",
                table(["SENDER", "MEDIAN", "MIN", "MAX", "LOST (MEDIAN)",
                       "CPU BUSY / SOFTIRQ (LAST ROUND)"], rows)]
    out.append("   veth runs dut0's receive work on the sending CPU, inside the send: it costs "
               "every sender alike")
    return "\n".join(out)


def _panel(ax, report):
    sinks = list(report["tx_dps"])
    colors = {"tokensender": ZEROLAYER, "sendto": FLOOR, "sendmmsg": C_CEILING}
    for i, sink in enumerate(sinks):
        for j, (name, fig) in enumerate(report["tx_dps"][sink].items()):
            label = (f"TokenSender, AF_XDP ({report['tx_mode']})" if name == "tokensender"
                     else name) if i == 0 else None
            bar(ax, i + (j - 1) * 0.28, fig, colors[name], label, 1e6, 0.27)
    ax.set_xticks(range(len(sinks)), [f"sink {s}" for s in sinks])
    ax.set_title("Sending on veth, M datagrams/s at dut0", fontsize=10)
    ratio_note(ax, report, "tx_ratio.xdp.vs_sendto", "TokenSender / sendto, sink xdp: ")
    ax.legend(fontsize=7)


SECTION = Section(
    name="tx", full=Plan(rounds=5, datagrams=500_000), quick=Plan(rounds=2, datagrams=20_000),
    measure=_measure, report=_report, render=_render, panel=_panel,
    targets=lambda report: judged(TARGETS, report), on_lab=True,
    options={"tx_datagrams": "datagrams"})
