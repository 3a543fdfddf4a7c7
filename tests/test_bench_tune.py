# SPDX-License-Identifier: Apache-2.0
"""The tune section of `zerolayer bench` (each shipped tuning profile's
effect on the latency section's 1000x50 load, without and with it in
alternating rounds) runs every profile's two arms on both paths, leaves the
host-wide knobs alone unless told, and leaves the lab, the host and tune's
own state as it found them, whatever happens in an arm. Whether a profile
lowers the p99 here is for the benchmark to say: no test asserts a time."""

import os
import subprocess

import pytest

from pyxdp.bench import runner
from pyxdp.bench.tune import arms, measure
from pyxdp.bench.tune.section import PATHS, QUICK
from pyxdp.lab.veth_lab import Lab
from pyxdp.tuning import profile
from pyxdp.tuning.report import Report, Row
from pyxdp.tuning.state import DEFAULT_DIR
from support.bench_helpers import assert_figure, bench_json, usage_error
from support.cli_runner import run_cli

PROFILES = profile.shipped()
SYSCTLS, ATTRS = arms.touched(PROFILES)
EFFECT_KEYS = ["p99_us_without", "p99_us_with", "p99_ratio", "p99_ratio_on_time", "p50_ratio",
               "cpu_per_frame_ratio", "lost", "applied", "skipped"]
# The labels the engine gives a profile's host-wide knobs, by kind.
HOST_WIDE_LABELS = {"governor": "cpufreq scaling_governor", "cpuidle": "cpuidle states disabled",
                    "qdisc": "net.core.default_qdisc", "irq_affinity": "dut0 irq affinity"}


def host_values() -> dict[str, str]:
    """The host's own values of the sysctls the profiles name, and tune's
    default state directory: what the bench must not change."""
    out = {}
    for name in SYSCTLS:
        proc = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True)
        out[name] = proc.stdout.strip() if proc.returncode == 0 else "absent"
    out[DEFAULT_DIR] = " ".join(sorted(os.listdir(DEFAULT_DIR))) if os.path.isdir(
        DEFAULT_DIR) else "absent"
    return out


def host_wide(name: str) -> set[str]:
    """The knobs of profile NAME that change the whole host, read from the profile."""
    out = set()
    for step in profile.load(name).steps:
        for spec in step.knobs:
            if spec.kind == "sysctl" and spec["scope"] == "global":
                out.add(spec["name"])
            elif spec.kind in HOST_WIDE_LABELS:
                out.add(HOST_WIDE_LABELS[spec.kind])
    return out


@pytest.fixture(scope="module")
def tune():
    before = host_values()
    report, progress = bench_json("--section", "tune", "--quick")
    return report, progress, before, host_values()


@pytest.mark.root
def test_every_profile_reports_both_arms_on_both_paths(tune):
    report, progress, _, _ = tune
    assert list(report) == ["machine", "quick", "tune_effect", "tune_step_effect", "tune_load",
                            "tune_lab_state",
                            "tune_runs", "tune_notes", "targets", "duration_s"]
    assert list(report["tune_effect"]) == PROFILES and set(PROFILES) >= {
        "latency", "throughput", "inf2"}
    for name, effect in report["tune_effect"].items():
        assert list(effect) == EFFECT_KEYS, name
        for key in ("p99_us_without", "p99_us_with", "p99_ratio", "p50_ratio",
                    "cpu_per_frame_ratio"):
            assert list(effect[key]) == list(PATHS), (name, key)
            for path in PATHS:
                assert_figure(effect[key][path], QUICK.rounds)
                assert effect[key][path]["median"] > 0, (name, key, path)
        assert list(effect["p99_ratio_on_time"]) == list(PATHS)
        for fig in effect["p99_ratio_on_time"].values():  # None: the sender was late
            assert fig is None or (fig["rounds"] == QUICK.rounds and fig["median"] > 0)
        ratio = effect["p99_ratio"]["af_xdp"]["median"]
        assert ratio == pytest.approx(effect["p99_us_with"]["af_xdp"]["median"]
                                      / effect["p99_us_without"]["af_xdp"]["median"])
        assert effect["applied"], name  # each profile has knobs of the lab's own
    runs = report["tune_runs"]
    assert [(r["profile"], r["arm"], r["path"]) for r in runs] == [
        (name, arm, path) for name in PROFILES for arm in ("without", "with") for path in PATHS]
    for run in runs:
        assert run["sent"] == QUICK.load.frames and 0 < run["received"] <= run["sent"]
    assert report["targets"] == [] and report["tune_load"]["host_wide"] is False
    assert report["tune_step_effect"] is None and report["tune_load"]["steps"] is False
    assert "host-wide knobs left alone" in progress


@pytest.mark.root
def test_host_wide_knobs_are_skipped_without_the_option(tune):
    report, _, before, after = tune
    for name, effect in report["tune_effect"].items():
        said = {s["knob"] for s in effect["skipped"] if s["why"] == arms.HOST_WIDE}
        assert said == host_wide(name), name
        assert not said & set(effect["applied"]), name
    assert after == before  # the host's values, and tune's own state directory


@pytest.mark.root
def test_the_lab_reads_back_as_before(tune):
    report, _, _, _ = tune
    state = report["tune_lab_state"]
    assert state["same"] is True and state["after"] == state["before"]
    assert set(state["before"]) == {*SYSCTLS, *(f"dut0/{a}" for a in ATTRS), "dut0 qdiscs"}
    applied = {knob for e in report["tune_effect"].values() for knob in e["applied"]}
    assert applied <= set(state["before"])  # every knob an arm changed was read back


@pytest.mark.root
def test_an_arm_that_fails_is_reverted_all_the_same(tmp_path):
    with Lab() as lab:
        before = arms.lab_state(lab, SYSCTLS, ATTRS)
        with pytest.raises(RuntimeError, match="the arm failed"):
            with arms.applied(profile.load("throughput"), lab, str(tmp_path),
                              host_wide=False) as effect:
                assert "dut0/napi_defer_hard_irqs" in effect["applied"]
                assert arms.lab_state(lab, SYSCTLS, ATTRS) != before
                raise RuntimeError("the arm failed")
        assert arms.lab_state(lab, SYSCTLS, ATTRS) == before
    assert os.listdir(tmp_path) == []  # nothing left to revert


@pytest.mark.parametrize("option, field", [("tune_host_wide", "host_wide"),
                                           ("tune_steps", "steps")])
def test_the_tune_options_go_with_the_tune_section_and_set_its_plan(option, field):
    flag = "--" + option.replace("_", "-")
    line = usage_error(run_cli("bench", "--section", "latency", flag))
    assert f"{flag} goes with --section tune" in line
    assert getattr(runner.plan(True).sections["tune"], field) is False
    assert getattr(runner.plan(True, **{option: True}).sections["tune"], field) is True


@pytest.mark.root
def test_each_step_that_changes_the_lab_is_measured_once_and_the_rest_say_why(tmp_path):
    """--tune-steps: the steps are found by applying each one to the lab
    (and reverting it); one that two profiles share knob for knob is one
    unit, advice is not run, and the lab reads back as before."""
    profiles = [profile.load(name) for name in PROFILES]
    with Lab() as lab:
        before = arms.lab_state(lab, SYSCTLS, ATTRS)
        units, steps = measure._steps_that_change(profiles, lab, str(tmp_path), False)
        assert arms.lab_state(lab, SYSCTLS, ATTRS) == before
    assert os.listdir(tmp_path) == []
    names = [unit.name for unit in units]
    assert names == list(steps["measured"]) and len(set(names)) == len(names)
    assert all(len(unit.steps) == 1 for unit in units)
    # throughput's interrupt deferral acts on dut0 itself; tcp_fastopen is a
    # namespace's, and latency and inf2 share the step that sets it.
    assert "throughput/irq-deferral" in names
    assert steps["measured"]["latency/tcp-fastopen"] == ["inf2", "latency"]
    assert not [n for n in names if n.startswith("inf2/tcp-fastopen")]
    shared = {p: [s.id for s in profile.load(p).steps] for p in PROFILES}
    for entry in steps["not_run"]:
        name, step_id = entry["step"].split("/")
        assert step_id in shared[name] and entry["why"] in (
            "advice only: it sets nothing", "changes nothing here")
    # Host-wide steps change nothing without --tune-host-wide.
    busy = next(e for e in steps["not_run"] if e["step"].endswith("/busy-poll"))
    assert busy["why"] == "changes nothing here"
    assert {s["why"] for s in busy["skipped"]} == {arms.HOST_WIDE}


def test_an_arm_reports_each_knob_once_from_the_pass_that_owns_it():
    """With --tune-host-wide the host-wide knobs come from the host's pass
    (the dut's pass left them out); a per-device one on the lab's device
    cannot be set from the host, and says so. Without it, they are listed
    as not applied."""
    def report(*rows):
        return Report("apply", "p", None, "here", "state", rows=list(rows))

    dut = report(Row("s", "net.ipv4.tcp_fastopen", status="applied", scope="netns"),
                 Row("s", "net.core.busy_read", status="skipped", scope="global"),
                 Row("s", "dut0 irq affinity", status="skipped", scope="global"),
                 Row("s", "SO_ZEROCOPY", status="skipped", reason="per socket", kind="note"))
    host = report(Row("s", "net.ipv4.tcp_fastopen", status="skipped", scope="netns"),
                  Row("s", "net.core.busy_read", status="applied", scope="global"),
                  Row("s", "IFACE irq affinity", status="skipped", kind="irq_affinity"),
                  Row("s", "SO_ZEROCOPY", status="skipped", reason="per socket", kind="note"))
    assert arms.effect_of([dut, host], host_wide=True) == {
        "applied": ["net.ipv4.tcp_fastopen", "net.core.busy_read"],
        "skipped": [{"knob": "dut0 irq affinity", "why": arms.NOT_SEEN},
                    {"knob": "SO_ZEROCOPY", "why": "skipped: per socket"}]}
    assert arms.effect_of([dut], host_wide=False) == {
        "applied": ["net.ipv4.tcp_fastopen"],
        "skipped": [{"knob": "net.core.busy_read", "why": arms.HOST_WIDE},
                    {"knob": "dut0 irq affinity", "why": arms.HOST_WIDE},
                    {"knob": "SO_ZEROCOPY", "why": "skipped: per socket"}]}
