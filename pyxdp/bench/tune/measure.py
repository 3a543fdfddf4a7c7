# SPDX-License-Identifier: Apache-2.0
"""The tune section's runs, on the bench's veth lab with zerolayer attached
to dut0: for each shipped profile, in each round, an arm without it and an
arm with it (arms.applied), the order ABBA over rounds (without first in
rounds 1, 3, ..., with first in rounds 2, 4, ...), each arm the latency
section's load on each path (the paths' order reversed in rounds 2, 4, ...). A run is
the latency section's (pyxdp.bench.latency.measure.session): the paced
sender in the peer, the pinned consumer process on the dut.

Before the first arm and after the last, the lab's settings the profiles
may touch are read (arms.lab_state): the two must be equal.
"""

import os
import tempfile
from collections.abc import Callable

from pyxdp.bench.latency import measure as latency
from pyxdp.bench.tune import arms
from pyxdp.tuning import profile


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
    state_dir = tempfile.mkdtemp(prefix="zerolayer-bench-tune-")
    try:
        with latency.session(lab) as session:
            for r in range(plan.rounds):
                paths = plan.paths if r % 2 == 0 else plan.paths[::-1]
                for name in names:
                    for with_profile in _arms(r):
                        arm = "with" if with_profile else "without"
                        progress(f"round {r + 1}/{plan.rounds}: {name}, {arm} it: "
                                 f"{plan.load.name} for {plan.load.seconds:g} s on "
                                 + ", ".join(paths))
                        if not with_profile:
                            runs += _arm(session, plan.load, paths, r, name, arm)
                            continue
                        with arms.applied(name, lab, state_dir, plan.host_wide) as effect:
                            effects.setdefault(name, effect)
                            runs += _arm(session, plan.load, paths, r, name, arm)
        after = arms.lab_state(lab, sysctls, attrs)
    finally:
        # A state file left is a knob that could not be put back: the error
        # names it, and it must outlive the run.
        if not os.listdir(state_dir):
            os.rmdir(state_dir)
    return {"profiles": names, "runs": runs, "effects": effects, "compiler": session.compiler,
            "cpus": session.cpus, "lab_state": {"before": before, "after": after}}


def _arm(session, load, paths, r: int, name: str, arm: str) -> list[dict]:
    return [{"round": r, "profile": name, "arm": arm, "path": path, **session.run(path, load)}
            for path in paths]
