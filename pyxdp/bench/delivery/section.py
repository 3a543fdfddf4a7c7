# SPDX-License-Identifier: Apache-2.0
"""Delivery into Python, the `delivery` section of `zerolayer bench`: rounds
of pyxdp.bench.delivery.xsk_vs_udp (pyxdp's AF_XDP socket against a UDP
socket at each tier of work per frame, and a C consumer on libxdp at the
touch tier, under the same generator load) on the bench's lab, where the
bench has attached zerolayer to dut0.

xsk_vs_udp owns the measurement; this module builds the C consumer once,
runs the rounds, the consumers of each tier in one order on even rounds and
the other on odd ones, keeps per round what the bench reports, and reports,
renders and draws it.
"""

from dataclasses import dataclass

from pyxdp.bench.delivery import c_consumer
from pyxdp.bench.delivery.tiers import TIER_WORK, TIERS
from pyxdp.bench.drawing import C_CEILING, FLOOR, ZEROLAYER, bar, verdicts
from pyxdp.bench.figures import cells, figure, figure_of
from pyxdp.bench.section import Progress, Rig, Section, Target, judged
from pyxdp.human import number, table

FRAMES = 1_000_000
QUICK_FRAMES = 50_000


def measure(lab, gen, *, rounds: int, frames: int = FRAMES) -> dict:
    """Per-round lists, by run name ("xsk_touch", "c_touch"...): frames/s
    ("fps") and frames lost ("lost"); per tier the ratio of pyxdp to the UDP
    socket, and pyxdp to C at the touch tier; the AF_XDP socket's mode, the
    C consumer's build, and the last round whole. GEN is the bench's
    LiveGenerator in the lab's peer namespace, reused by every round (a new
    one is a compile)."""
    # AF_XDP and numpy: only when this section runs
    from pyxdp.bench.delivery import xsk_vs_udp as xsk_bench

    fps: dict[str, list[float]] = {}
    lost: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {tier: [] for tier in TIERS}
    ratios["xsk_vs_c"] = []
    run: dict = {}
    with c_consumer.built() as build:
        for i in range(rounds):
            run = xsk_bench.run(frames, lab=lab, generator=gen, c_binary=build.binary,
                                reverse=i % 2 == 1)
            for name, result in run["runs"].items():
                fps.setdefault(name, []).append(result["fps"])
                lost.setdefault(name, []).append(result["lost"]["total"])
            for tier in TIERS:
                ratios[tier].append(_ratio(run, f"xsk_{tier}", f"udp_{tier}"))
            if build.binary:
                ratios["xsk_vs_c"].append(_ratio(run, "xsk_touch", "c_touch"))
    # the last round's loss reasons and details, as xsk_bench gives them
    return {"fps": fps, "lost": lost, "ratio": ratios, "xsk_mode": run["xsk_mode"],
            "c_consumer": build.to_json(), "load": xsk_bench.LOAD, "last_round": run}


def _ratio(run: dict, over: str, under: str) -> float:
    runs = run["runs"]
    return runs[over]["fps"] / runs[under]["fps"] if runs[under]["fps"] else 0.0


def delivery_keys(tier: str) -> dict[str, str]:
    """The report keys of TIER's figures: frames/s of pyxdp ("xsk") and of
    the UDP socket ("udp"), their ratio, and the frames each lost. The count
    tier keeps the keys the section had before it had tiers."""
    if tier == "count":
        return {"xsk": "xsk_fps", "udp": "udp_fps", "ratio": "delivery_ratio",
                "xsk_lost": "xsk_lost", "udp_lost": "udp_lost"}
    return {"xsk": f"xsk_{tier}_fps", "udp": f"udp_{tier}_fps",
            "ratio": f"delivery_{tier}_ratio", "xsk_lost": f"xsk_{tier}_lost",
            "udp_lost": f"udp_{tier}_lost"}


@dataclass(frozen=True)
class Plan:
    rounds: int
    frames: int  # datagrams offered to each consumer at each tier


DELIVERY = "delivery into Python, every frame touched, AF_XDP against a UDP socket"
TARGETS = [
    Target(DELIVERY, "delivery_touch_ratio", ">=", 2.0),
    Target(DELIVERY, "delivery_touch_ratio", ">=", 3.0, "goal"),
    Target("delivery into Python, every frame touched, pyxdp against a C consumer on libxdp",
           "xsk_touch_vs_c_ratio", ">=", 0.8),
]


def _measure(plan: Plan, rig: Rig | None, progress: Progress) -> dict:
    assert rig is not None  # an on_lab section
    progress(f"delivery into Python: {plan.rounds} rounds of "
             f"{plan.frames:,} datagrams per consumer and tier (count, touch, act), "
             "AF_XDP, a UDP socket and a C consumer (touch)")
    return measure(rig.lab, rig.generator, rounds=plan.rounds, frames=plan.frames)


def _report(plan: Plan, d: dict) -> dict:
    fps, lost, ratio = d["fps"], d["lost"], d["ratio"]
    has_c = "c_touch" in fps
    report = {"xsk_mode": d["xsk_mode"], "delivery_frames_offered": plan.frames,
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


def _render(r: dict) -> str:
    runs = r["delivery_last_round"]["runs"]

    def row(tier: str, side: str, name: str, fps: dict, lost: dict) -> list[str]:
        return [tier, name, *cells(fps, "{:,.0f}"), number(lost["median"]),
                runs[f"{side}_{tier}"]["limited_by"]]

    rows = []
    for tier in TIERS:
        keys = delivery_keys(tier)
        rows += [row(tier, "xsk", f"AF_XDP, pyxdp ({r['xsk_mode']} mode)", r[keys["xsk"]],
                     r[keys["xsk_lost"]]),
                 row(tier, "udp", "UDP socket", r[keys["udp"]], r[keys["udp_lost"]]),
                 [tier, "pyxdp / UDP", *cells(r[keys["ratio"]], "{:.2f}x"), "", ""]]
        if tier == "touch" and r["c_touch_fps"] is not None:
            rows += [row(tier, "c", f"AF_XDP, C on libxdp ({r['c_consumer']['mode']} mode)",
                         r["c_touch_fps"], r["c_touch_lost"]),
                     [tier, "pyxdp / C", *cells(r["xsk_touch_vs_c_ratio"], "{:.2f}x"), "", ""]]
    out = [f"Delivery into Python, frames/s ({number(r['delivery_frames_offered'])} offered "
           f"per consumer and round: {r['delivery_load']})",
           table(["TIER", "CONSUMER", "MEDIAN", "MIN", "MAX", "LOST (MEDIAN)",
                  "LIMITED BY (LAST ROUND)"], rows)]
    out += [f"   {tier}: {TIER_WORK[tier]}" for tier in TIERS]
    out.append("   limited by: sender, the consumer lost at most 0.1% and could take more; "
               "consumer, it could not keep up")
    skipped = r["c_consumer"]["skipped"]
    if skipped:
        out.append(f"   C consumer skipped: {skipped}")
    return "\n".join(out)


def _panel(ax, report):
    """pyxdp and the UDP socket side by side at each tier, the C consumer
    beside them at the touch tier."""
    for i, tier in enumerate(TIERS):
        keys = delivery_keys(tier)
        bar(ax, i - 0.28, report[keys["xsk"]], ZEROLAYER,
            f"pyxdp, AF_XDP ({report['xsk_mode']})" if i == 0 else None, 1e6, 0.27)
        bar(ax, i, report[keys["udp"]], FLOOR, "UDP socket" if i == 0 else None, 1e6, 0.27)
    if report["c_touch_fps"] is not None:
        bar(ax, TIERS.index("touch") + 0.28, report["c_touch_fps"], C_CEILING,
            f"C on libxdp, AF_XDP ({report['c_consumer']['mode']})", 1e6, 0.27)
    ax.set_xticks(range(len(TIERS)), list(TIERS))
    ax.set_title("Delivery into Python by work per frame, M frames/s", fontsize=10)
    notes = []
    for key, text in (("delivery_touch_ratio", "touch, pyxdp/UDP: "),
                      ("xsk_touch_vs_c_ratio", "touch, pyxdp/C: ")):
        fig = figure_of(report, key)
        if fig is not None:
            notes.append(f"{text}{fig['median']:.2f}x; {verdicts(report, key)}")
    if report["c_consumer"]["skipped"]:
        notes.append(f"C consumer skipped: {report['c_consumer']['skipped']}")
    ax.set_xlabel("\n".join(notes), fontsize=8)
    ax.legend(fontsize=7)


SECTION = Section(
    name="delivery", full=Plan(rounds=5, frames=FRAMES), quick=Plan(rounds=2, frames=QUICK_FRAMES),
    measure=_measure, report=_report, render=_render, panel=_panel,
    targets=lambda report: judged(TARGETS, report), on_lab=True, needs_generator=True,
    options={"delivery_frames": "frames"})
