# SPDX-License-Identifier: Apache-2.0
"""The tune section's runs, on the bench's veth lab with zerolayer attached
to dut0: for each shipped profile, in each round, an arm without it and an
arm with it (arms.applied), the order ABBA over rounds (without first in
rounds 1, 3, ..., with first in rounds 2, 4, ...), each arm the latency
section's load on each path (the paths' order reversed in rounds 2, 4, ...). A run is
the latency section's (pyxdp.bench.latency.measure.session): the paced
sender in the peer, the pinned consumer process on the dut.

With the plan's `steps` (--tune-steps), each step of each profile is also
measured alone, the same way, as a profile of that one step named
PROFILE/STEP: a step that another profile has too, knob for knob, is
measured once (named after the smallest profile that has it). A step of advice only
(kinds note and refuse) sets nothing and is not run; the others are applied
once before the rounds, and one that changes nothing here (every knob
already at its value, absent, or host-wide and not allowed) is listed with
what it skipped, not run.

Before the first arm and after the last, the lab's settings the profiles
may touch are read (arms.lab_state): the two must be equal.
"""

import os
import tempfile
from collections.abc import Callable

from pyxdp.bench.latency import measure as latency
from pyxdp.bench.tune import arms
from pyxdp.tuning import profile
from pyxdp.tuning.profile import Profile, Step

ADVICE = {"note", "refuse"}  # the kinds that set nothing (pyxdp/tuning/advice.py)


def _arms(r: int) -> tuple[bool, bool]:
    """Whether each arm of round R is with the profile: ABBA over rounds."""
    return (False, True) if r % 2 == 0 else (True, False)


def measure(lab, plan, progress: Callable[[str], None]) -> dict:
    """Every run of PLAN (pyxdp.bench.tune.section.Plan) on LAB, what each
    profile's arm applied and skipped, and the lab's settings before and after."""
    names = profile.shipped()
    sysctls, attrs = arms.touched(names)
    before = arms.lab_state(lab, sysctls, attrs)
    runs: list[dict] = []
    effects: dict[str, dict] = {}
    steps: dict = {"measured": {}, "not_run": []}  # what --tune-steps found
    state_dir = tempfile.mkdtemp(prefix="zerolayer-bench-tune-")
    try:
        units = [profile.load(name) for name in names]
        if plan.steps:
            alone, steps = _steps_that_change(units, lab, state_dir, plan.host_wide)
            units += alone
        with latency.session(lab) as session:
            for r in range(plan.rounds):
                paths = plan.paths if r % 2 == 0 else plan.paths[::-1]
                for unit in units:
                    for with_profile in _arms(r):
                        arm = "with" if with_profile else "without"
                        progress(f"round {r + 1}/{plan.rounds}: {unit.name}, {arm} it: "
                                 f"{plan.load.name} for {plan.load.seconds:g} s on "
                                 + ", ".join(paths))
                        if not with_profile:
                            runs += _arm(session, plan.load, paths, r, unit.name, arm)
                            continue
                        with arms.applied(unit, lab, state_dir, plan.host_wide) as effect:
                            effects.setdefault(unit.name, effect)
                            runs += _arm(session, plan.load, paths, r, unit.name, arm)
        after = arms.lab_state(lab, sysctls, attrs)
    finally:
        # A state file left is a knob that could not be put back: the error
        # names it, and it must outlive the run.
        if not os.listdir(state_dir):
            os.rmdir(state_dir)
    return {"profiles": names, "steps": steps, "runs": runs, "effects": effects,
            "compiler": session.compiler,
            "cpus": session.cpus, "lab_state": {"before": before, "after": after}}


def _arm(session, load, paths, r: int, name: str, arm: str) -> list[dict]:
    return [{"round": r, "profile": name, "arm": arm, "path": path, **session.run(path, load)}
            for path in paths]


def _steps_that_change(profiles: list[Profile], lab, state_dir: str,
                       host_wide: bool) -> tuple[list[Profile], dict]:
    """Each distinct step of PROFILES that sets something here, as a profile
    of its own, named after the smallest profile that has it (the one an
    including profile took it from); and what was found: "measured" (name
    -> the profiles that have it) and "not_run" (each step left out, and why)."""
    steps: dict = {"measured": {}, "not_run": []}
    distinct: list[tuple[Step, list[Profile]]] = []
    for prof in profiles:
        for step in prof.steps:
            same = next((having for known, having in distinct
                         if (known.id, known.knobs) == (step.id, step.knobs)), None)
            if same is None:
                distinct.append((step, [prof]))
            else:
                same.append(prof)
    out = []
    for step, having in distinct:
        owner = min(having, key=lambda p: len(p.steps))
        unit = Profile(f"{owner.name}/{step.id}", step.why, (step,))
        names = [p.name for p in having]
        if all(spec.kind in ADVICE for spec in step.knobs):
            steps["not_run"].append({"step": unit.name, "profiles": names,
                                     "why": "advice only: it sets nothing"})
            continue
        with arms.applied(unit, lab, state_dir, host_wide) as effect:
            pass
        if not effect["applied"]:
            steps["not_run"].append({"step": unit.name, "profiles": names,
                                     "why": "changes nothing here", "skipped": effect["skipped"]})
            continue
        steps["measured"][unit.name] = names
        out.append(unit)
    return out, steps
