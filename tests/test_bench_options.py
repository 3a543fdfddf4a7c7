# SPDX-License-Identifier: Apache-2.0
"""`zerolayer bench` options, checked before anything is measured (so as
anyone, root or not): options that go with a section not chosen, a plot
that cannot be drawn; and the plans and targets the options lead to.
matplotlib is the optional [plot] extra: without it, --plot says what to
install, and nothing imports it before a plot is drawn."""

import dataclasses
import os
import subprocess
import sys

import pytest

from pyxdp.bench import runner as bench
from pyxdp.bench.figures import figure, figure_of
from pyxdp.bench.registry import SECTIONS
from pyxdp.bench.relay import section as relay_bench
from support.bench_helpers import usage_error
from support.cli_runner import ZEROLAYER
from support.xdp_helpers import one_line_error

NOT_STARTED = ("compiling", "parser cost", "TCP relay")


@pytest.mark.parametrize("args, message", [
    (["--section", "parser", "--delivery-frames", "5000"],
     "--delivery-frames goes with --section delivery"),
    (["--relay-streams", "4"], "--relay-streams goes with --section relay"),
    (["--section", "xdp", "--section", "delivery", "--relay-frames", "5000"],
     "--relay-frames goes with --section relay"),
    (["--section", "relay", "--delivery-frames", "5000"],
     "--delivery-frames goes with --section delivery"),
    (["--section", "nosuch"], "'nosuch' is not one of " + ", ".join(f"'{s}'" for s in SECTIONS)),
    (["--section", "relay", "--tx-datagrams", "5000"], "--tx-datagrams goes with --section tx"),
    (["--section", "relay", "--relay-streams", "0"], "0 is not in the range"),
    (["--rounds", "0"], "0 is not in the range"),
])
def test_an_option_that_does_not_apply_is_a_usage_error(cli, args, message):
    line = usage_error(cli("bench", *args))
    assert message in line, line
    assert not any(word in line for word in NOT_STARTED)


def test_a_plot_that_cannot_be_written_is_refused_before_measuring(cli, tmp_path):
    line = usage_error(cli("bench", "--quick", "--plot", tmp_path / "missing" / "b.png"))
    assert "cannot write into" in line


@pytest.fixture
def without_matplotlib(tmp_path) -> dict:
    """An environment in which `import matplotlib` fails as if it were not
    installed: a sitecustomize, first on the path, blocks it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.modules['matplotlib'] = None  # import matplotlib: ModuleNotFoundError\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", "import matplotlib"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "ModuleNotFoundError" in proc.stderr, proc.stderr
    return env


def test_plot_without_matplotlib_says_what_to_install(tmp_path, without_matplotlib):
    proc = subprocess.run([ZEROLAYER, "bench", "--quick", "--plot", str(tmp_path / "b.png")],
                          env=without_matplotlib, capture_output=True, text=True, timeout=60)
    line = one_line_error(proc)
    assert "--plot needs matplotlib" in line and "[plot] extra" in line and "pip install" in line
    assert not proc.stdout and not (tmp_path / "b.png").exists()


def test_nothing_imports_matplotlib_before_a_plot_is_drawn(without_matplotlib):
    """Every pyxdp module imports, and `zerolayer bench --help` runs, where
    matplotlib cannot be imported."""
    every_module = (
        "import importlib, pkgutil, pyxdp\n"
        "for m in pkgutil.walk_packages(pyxdp.__path__, 'pyxdp.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n")
    proc = subprocess.run([sys.executable, "-c", every_module], env=without_matplotlib,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([ZEROLAYER, "bench", "--help"], env=without_matplotlib,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--section" in proc.stdout, proc.stderr


def test_the_plan_takes_what_the_options_give():
    plan = bench.plan(quick=True, rounds=3, delivery_frames=5000, relay_streams=[4, 1, 4],
                      relay_frames=8000)
    own = plan.sections
    assert [p.rounds for p in own.values()] == [3] * len(SECTIONS)
    assert own["delivery"].frames == 5000 and plan.quick
    assert own["parser"].repeats == bench.QUICK.sections["parser"].repeats
    assert own["tx"] == bench.QUICK.sections["tx"].__class__(rounds=3, datagrams=20_000)
    assert own["relay"] == dataclasses.replace(relay_bench.QUICK, rounds=3, flood_frames=8000,
                                               streams=(4, 1))
    assert bench.plan() == bench.FULL and bench.plan(quick=True) == bench.QUICK
    with pytest.raises(TypeError, match="no bench section takes nosuch_option"):
        bench.plan(nosuch_option=1)


def test_figures_and_targets():
    fig = figure([3, 1, 2])
    assert (fig["median"], fig["min"], fig["max"], fig["rounds"]) == (2, 1, 3, 3)
    report = {"parser_ratio": {"4": figure([2.5])}, "xdp_ratio": figure([0.9]),
              "delivery_ratio": figure([9.0]), "delivery_touch_ratio": figure([2.4]),
              "xsk_touch_vs_c_ratio": figure([0.7])}
    met = [(t["key"], t["kind"], t["met"])
           for t in bench.targets(report, ["parser", "xdp", "delivery"])]
    assert met == [("xdp_ratio", "target", True),
                   ("delivery_touch_ratio", "target", True),
                   ("delivery_touch_ratio", "goal", False),
                   ("xsk_touch_vs_c_ratio", "target", False)]
    # a section not run has no targets
    assert [t["key"] for t in bench.targets({"xdp_ratio": figure([0.5])}, ["xdp"])] == [
        "xdp_ratio"]
    # nor has a figure that was skipped (the C consumer, without a compiler)
    skipped = {"delivery_touch_ratio": figure([2.4]), "xsk_touch_vs_c_ratio": None}
    assert [t["key"] for t in bench.targets(skipped, ["delivery"])] == [
        "delivery_touch_ratio"] * 2


def test_the_relay_targets_name_their_figures():
    ratios = {"throughput_vs_asyncio": figure([4.0]), "paced_p99_vs_asyncio": figure([1.2])}
    report = {"relay": {"results": {"1": {"sockmap_ratio": ratios},
                                    "64": {"sockmap_ratio": {}}}}}  # 64: a way failed
    got = bench.targets(report, ["relay"])
    assert [(t["measured"], t["met"]) for t in got] == [(4.0, True), (1.2, False)]
    assert [figure_of(report, t["key"]) for t in got] == [
        ratios["throughput_vs_asyncio"], ratios["paced_p99_vs_asyncio"]]
    # the gateway's cadence: against haproxy, latency and the CPU a frame
    cadence = {"p99_vs_haproxy": figure([0.9]), "cpu_per_frame_vs_haproxy": figure([1.3])}
    report["relay"].update(cadence={"sockmap_ratio": cadence},
                           load={"cadence_streams": 1000, "cadence_rate": 20})
    got = bench.targets(report, ["relay"])[2:]
    assert [(t["measured"], t["met"]) for t in got] == [(0.9, True), (1.3, False)]
    assert [figure_of(report, t["key"]) for t in got] == list(cadence.values())
    assert "1,000 streams at 20 frames/s each" in got[0]["what"]
