# SPDX-License-Identifier: Apache-2.0
"""The `core` section of `zerolayer bench`: what a batch of 16, 256 and
1,024 datagrams costs Python's receive and send paths, fixed per batch and
per frame, the pure core against the compiled one, on synthetic rings
(pyxdp.bench.core.cost says how it is measured). It has no targets."""

from dataclasses import dataclass

from pyxdp.bench.drawing import FLOOR, ZEROLAYER, bar
from pyxdp.bench.figures import figure
from pyxdp.bench.section import Progress, Rig, Section
from pyxdp.human import table


@dataclass(frozen=True)
class Plan:
    rounds: int
    repeats: int  # batches timed per size, per core and round


def _measure(plan: Plan, rig: Rig | None, progress: Progress) -> dict:
    from pyxdp.bench.core import cost  # numpy and the cores: only when this section runs

    progress(f"per-batch cost: {plan.rounds} rounds of {plan.repeats} batches of "
             f"{', '.join(map(str, cost.SIZES))} datagrams per core "
             f"({' and '.join(cost.cores())}), receive and send, on synthetic rings")
    return cost.measure(plan.rounds, plan.repeats)


def _report(plan: Plan, c: dict) -> dict:
    from pyxdp.bench.core import cost

    cores = [name for name in c if name != "speedup"]  # those measured, in cost.cores() order
    out: dict = {"load": cost.LOAD, "frames_per_datagram": cost.FRAMES,
                 "sizes": list(cost.SIZES), "cores": cores}
    for name in cores:
        out[name] = {path: {"batch_ns": {n: figure(v) for n, v in r["batch_ns"].items()},
                            **{k: figure(r[k]) for k in ("fixed_ns", "per_datagram_ns",
                                                         "per_frame_ns")}}
                     for path, r in c[name].items()}
    if "speedup" in c:
        out["speedup"] = {path: {n: figure(v) for n, v in by.items()}
                          for path, by in c["speedup"].items()}
    return {"core": out}


def _render(r: dict) -> str:
    c = r["core"]
    rows = []
    for path, what in (("rx", "receive"), ("tx", "send")):
        for name in c["cores"]:
            f = c[name][path]
            rows.append([what, name, *(f"{f['batch_ns'][str(n)]['median'] / 1000:,.1f}"
                                       for n in c["sizes"]),
                         f"{f['fixed_ns']['median'] / 1000:,.1f}",
                         f"{f['per_frame_ns']['median']:,.0f}"])
        if "speedup" in c:
            rows.append([what, "pure / compiled",
                         *(f"{c['speedup'][path][str(n)]['median']:.2f}x" for n in c["sizes"]),
                         "", ""])
    return "\n".join([
        f"Per-batch cost of the Python paths on synthetic rings ({c['load']}): us per "
        "batch (medians), fixed us per batch and ns per frame (a line through the sizes)",
        table(["PATH", "CORE", *(f"{n}/BATCH" for n in c["sizes"]), "FIXED US", "NS/FRAME"],
              rows)])


def _panel(ax, report):
    c = report["core"]
    colors = {"pure": FLOOR, "compiled": ZEROLAYER}
    width = 0.8 / (2 * len(c["cores"]))
    for i, n in enumerate(c["sizes"]):
        for j, (path, name) in enumerate((p, k) for p in ("rx", "tx") for k in c["cores"]):
            fig = {k: v / 1000 for k, v in c[name][path]["batch_ns"][str(n)].items()
                   if k in ("median", "min", "max")}
            label = f"{'receive' if path == 'rx' else 'send'}, {name}" if i == 0 else None
            bar(ax, i + (j - 1.5) * width, fig, colors[name], label, 1.0, width * 0.95)
            ax.patches[-1].set_hatch("//" if path == "tx" else "")
    ax.set_xticks(range(len(c["sizes"])), [f"{n} a batch" for n in c["sizes"]])
    ax.set_yscale("log")
    ax.set_title("Python paths, us per batch (lower is better)", fontsize=10)
    ax.legend(fontsize=7)


SECTION = Section(
    name="core", full=Plan(rounds=5, repeats=200), quick=Plan(rounds=2, repeats=20),
    measure=_measure, report=_report, render=_render, panel=_panel, targets=lambda report: [])
