# SPDX-License-Identifier: Apache-2.0
"""The `tune` section of `zerolayer bench`: what each shipped tuning
profile (pyxdp.tuning.profile.shipped()) does to the latency section's
1,000 streams x 50 frames/s load, on the af_xdp and udp paths, on the
bench's veth lab with zerolayer attached to dut0.

Each round has, per profile, an arm without it and an arm with it, ABBA
over rounds; the profile is applied to the lab for its arm and reverted
after it (pyxdp/bench/tune/arms.py says what is applied where: host-wide
knobs only with --tune-host-wide). A profile's p99 ratio is taken within a
round, with over without, then its median. With --tune-steps each step of
each profile is measured alone too (tune_step_effect), so a profile's
effect can be laid to its knobs. The section measures and sets
no target: whether a profile helps here is what it reports. The lab's
settings the profiles touch must read back after the section as before it,
or the command fails.
"""

from dataclasses import dataclass

from pyxdp.bench import c_build
from pyxdp.bench.drawing import FLOOR, ZEROLAYER, bar
from pyxdp.bench.figures import figure
from pyxdp.bench.latency import on_time
from pyxdp.bench.latency import section as latency
from pyxdp.bench.latency.sender import SOURCE
from pyxdp.bench.section import Progress, Rig, Section
from pyxdp.human import table

PATHS = ("af_xdp", "udp")  # of the latency section's


@dataclass(frozen=True)
class Plan:
    rounds: int
    load: latency.Load
    paths: tuple[str, ...] = PATHS
    host_wide: bool = False  # --tune-host-wide: apply the profiles' host-wide knobs too
    steps: bool = False  # --tune-steps: measure each step of each profile alone too


_LOAD = next(ld for ld in latency.FULL.loads if ld.name == "1000x50")
FULL = Plan(rounds=4, load=_LOAD)  # an even number of rounds: each arm first as often
QUICK = Plan(rounds=1, load=latency.Load(_LOAD.name, _LOAD.streams, _LOAD.rate, 1.0))
SCOPE_NOTE = ("applied in the lab's dut namespace and on its dut0 (a veth); the peer, where "
              "the load comes from, is left as it is; a NIC pair (--pair) is not yet in this "
              "section's scope")


def _measure(plan: Plan, rig: Rig | None, progress: Progress) -> dict:
    from pyxdp.bench.tune import measure  # AF_XDP, numpy, the engine: only when this runs

    assert rig is not None  # an on_lab section
    progress(f"tune: {plan.rounds} round{'s' if plan.rounds > 1 else ''} of each shipped "
             f"profile, without and with it, {plan.load.name} for {plan.load.seconds:g} s on "
             f"{', '.join(plan.paths)}; host-wide knobs "
             + ("applied" if plan.host_wide else "left alone")
             + ("; then each step that changes something, alone" if plan.steps else ""))
    return measure.measure(rig.lab, plan, progress)


def _runs(measured: dict, name: str, arm: str, path: str) -> list[dict]:
    return [r for r in measured["runs"]
            if (r["profile"], r["arm"], r["path"]) == (name, arm, path)]


def _effect(plan: Plan, measured: dict, name: str) -> dict:
    out: dict = {key: {} for key in ("p99_us_without", "p99_us_with", "p99_ratio",
                                     "p99_ratio_on_time", "p50_ratio", "cpu_per_frame_ratio")}
    bound = on_time.bound_us(measured["runs"])
    for path in plan.paths:
        without, with_ = (_runs(measured, name, arm, path) for arm in ("without", "with"))
        out["p99_us_without"][path] = figure(r["p99_us"] for r in without)
        out["p99_us_with"][path] = figure(r["p99_us"] for r in with_)
        out["p99_ratio"][path] = on_time.ratio(with_, without)
        out["p99_ratio_on_time"][path] = on_time.ratio(with_, without, bound=bound)
        out["p50_ratio"][path] = on_time.ratio(with_, without, "p50_us")
        out["cpu_per_frame_ratio"][path] = on_time.ratio(with_, without, "cpu_per_frame_us")
    out["lost"] = {arm: sum(r["lost"] for r in measured["runs"]
                            if r["profile"] == name and r["arm"] == arm)
                   for arm in ("without", "with")}
    return out | measured["effects"].get(name, {"applied": [], "skipped": []})


def _notes(plan: Plan, measured: dict) -> list[str]:
    notes = [SCOPE_NOTE]
    if not plan.host_wide:
        notes.append("host-wide knobs were not applied: each is listed under its profile's "
                     "`skipped`; `--tune-host-wide` applies them, on the host, for each arm")
    runs = measured["runs"]
    notes.append(on_time.late_note(runs, "p99_ratio_on_time"))
    for r in runs:
        if r["lost"]:
            notes.append(f"round {r['round'] + 1}, {r['profile']} {r['arm']} it, {r['path']}: "
                         f"{r['lost']:,} of {r['sent']:,} frames lost")
    state = measured["lab_state"]
    notes += [f"{key} read {state['before'][key]!r} before the section and "
              f"{state['after'].get(key)!r} after it" for key in state["before"]
              if state["before"][key] != state["after"].get(key)]
    return notes


def _step_effects(plan: Plan, measured: dict) -> dict:
    steps = measured["steps"]
    return {"measured": {name: {**_effect(plan, measured, name), "profiles": profiles}
                         for name, profiles in steps["measured"].items()},
            "not_run": steps["not_run"]}


def _report(plan: Plan, measured: dict) -> dict:
    ld = plan.load
    state = measured["lab_state"]
    return {
        "tune_effect": {name: _effect(plan, measured, name) for name in measured["profiles"]},
        "tune_step_effect": _step_effects(plan, measured) if plan.steps else None,
        "tune_load": {
            "load": {"name": ld.name, "streams": ld.streams, "frames_per_s_per_stream": ld.rate,
                     "frames_per_s": ld.streams * ld.rate, "seconds": ld.seconds,
                     "frames": ld.frames},
            "rounds": plan.rounds, "paths": list(plan.paths),
            "order": "per profile, without then with in rounds 1, 3, ..., with then "
                     "without in rounds 2, 4, ... (ABBA)",
            "host_wide": plan.host_wide, "steps": plan.steps, "datagram": latency.DATAGRAM,
            "sender": {"source": SOURCE.name, "command": c_build.command(SOURCE),
                       "compiler": measured["compiler"]},
            "cpus": measured["cpus"]},
        "tune_lab_state": {**state, "same": state["before"] == state["after"]},
        "tune_runs": measured["runs"],
        "tune_notes": _notes(plan, measured),
    }


def _rows(effects: dict, paths: list[str]) -> list[list[str]]:
    rows = []
    for name, effect in effects.items():
        for path in paths:
            ratio, quiet = effect["p99_ratio"][path], effect["p99_ratio_on_time"][path]
            p50, cpu = effect["p50_ratio"][path], effect["cpu_per_frame_ratio"][path]
            rows.append([name, path, f"{effect['p99_us_without'][path]['median']:,.1f}",
                         f"{effect['p99_us_with'][path]['median']:,.1f}",
                         f"{ratio['median']:.2f}x" if ratio else "",
                         f"{ratio['min']:.2f}-{ratio['max']:.2f}" if ratio else "",
                         f"{quiet['median']:.2f}x ({quiet['rounds']})" if quiet else "",
                         f"{p50['median']:.2f}x" if p50 else "",
                         f"{cpu['median']:.2f}x" if cpu else ""])
    return rows


def _render(r: dict) -> str:
    load = r["tune_load"]
    header = ["PATH", "P99 WITHOUT", "P99 WITH", "RATIO", "MIN-MAX", "SENDER ON TIME",
              "P50 RATIO", "CPU RATIO"]
    ld = load["load"]
    out = [f"Tuning profiles' effect on p99 latency, us, {ld['name']} ({ld['streams']:,} streams "
           f"x {ld['frames_per_s_per_stream']} frames/s, {ld['seconds']:g} s an arm; "
           f"{load['rounds']} round{'s' if load['rounds'] > 1 else ''}, ABBA)",
           table(["PROFILE", *header], _rows(r["tune_effect"], load["paths"]))]
    steps = r["tune_step_effect"]
    if steps is not None:
        out += ["Each step alone, the same way",
                table(["STEP", *header], _rows(steps["measured"], load["paths"]))]
        out += [f"   {s['step']}: not run, {s['why']}" for s in steps["not_run"]]
    for name, effect in r["tune_effect"].items():
        host = [s["knob"] for s in effect["skipped"] if s["why"].startswith("not applied: host")]
        out.append(f"   {name}: applied {', '.join(effect['applied']) or 'nothing'}"
                   + (f"; not applied, host-wide: {', '.join(host)}" if host else "")
                   + f"; {len(effect['skipped']) - len(host)} other row(s) skipped (--json says why)")
    out.append("   RATIO: p99 with the profile over without it, within a round, median of rounds;"
               " SENDER ON TIME: the same over the rounds (how many) where the sender kept its"
               " schedule in both arms (pyxdp/bench/latency/on_time.py); P50 RATIO and"
               " CPU RATIO (the consumer's CPU a frame): the same within-round ratios")
    out.append("   lab settings after the section: "
               + ("as before it" if r["tune_lab_state"]["same"] else "CHANGED"))
    out += [f"   note: {n}" for n in r["tune_notes"]]
    return "\n".join(out)


def _panel(ax, report):
    names = list(report["tune_effect"])
    paths = report["tune_load"]["paths"]
    width = 0.38
    colors = dict(zip(paths, (ZEROLAYER, FLOOR)))
    for i, name in enumerate(names):
        for j, path in enumerate(paths):
            fig = report["tune_effect"][name]["p99_ratio"][path]
            if fig is not None:
                bar(ax, i + (j - 0.5) * width, fig, colors[path], path if i == 0 else None,
                    1.0, width)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")  # 0.5x and 2x are as far from 1 (a loaded host's ratios span decades)
    ax.set_xticks(range(len(names)), names)
    ax.set_title("Tuning profiles: p99 with / without (below 1 is better)", fontsize=10)
    ax.set_xlabel(f"{report['tune_load']['load']['name']}, per-round ratios", fontsize=8)
    ax.legend(fontsize=7)


def _errors(report: dict) -> list[str]:
    state = report["tune_lab_state"]
    return [] if state["same"] else [
        "the lab's settings did not read back as before: "
        + ", ".join(k for k in state["before"] if state["before"][k] != state["after"].get(k))]


SECTION = Section(
    name="tune", full=FULL, quick=QUICK, measure=_measure, report=_report, render=_render,
    panel=_panel, targets=lambda report: [], errors=_errors, default=False, on_lab=True,
    options={"tune_host_wide": "host_wide", "tune_steps": "steps"})
