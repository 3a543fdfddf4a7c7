"""`zerolayer bench`: the quick mode runs every section on a real lab and
produces every key. No assertion here is about speed: the numbers belong to
the benchmark, not to the tests."""

import json

import pytest

from pyxdp.bench import runner as bench

pytestmark = pytest.mark.root

FIGURE_KEYS = {"median", "min", "max", "rounds", "values"}
FIGURES = ["zerolayer_dps", "pass_counter_dps", "xdp_ratio", "xsk_fps", "udp_fps",
           "delivery_ratio", "xsk_lost", "udp_lost"]
PER_FRAME_COUNT = ["parser_ns", "pass_floor_ns", "parser_ratio"]


def assert_figure(fig, rounds):
    assert set(fig) == FIGURE_KEYS
    assert fig["rounds"] == rounds == len(fig["values"])
    assert fig["min"] <= fig["median"] <= fig["max"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    from cli_runner import run_cli

    plot = tmp_path_factory.mktemp("bench") / "bench.png"
    proc = run_cli("bench", "--quick", "--json", "--plot", plot)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), plot, proc.stderr


def test_quick_bench_produces_every_key(quick_run):
    report, _, progress = quick_run
    assert report["quick"] is True
    for key in PER_FRAME_COUNT:
        assert list(report[key]) == ["1", "4", "16"]
        for fig in report[key].values():
            assert_figure(fig, bench.QUICK.parser_rounds)
    for key in FIGURES[:3]:
        assert_figure(report[key], bench.QUICK.xdp_rounds)
    for key in FIGURES[3:]:
        assert_figure(report[key], bench.QUICK.delivery_rounds)
    assert report["xdp_mode"] == "native"
    assert report["xsk_mode"] in ("copy", "zero-copy")
    assert 0 < report["seen_by_dut"] <= report["generator_sent"]
    assert {"kernel", "cpus", "arch"} <= set(report["machine"])
    assert [t["key"] for t in report["targets"]] == [
        "parser_ratio.4", "xdp_ratio", "delivery_ratio", "delivery_ratio"]
    assert all(isinstance(t["met"], bool) for t in report["targets"])
    # progress went to stderr, so stdout is one JSON document
    assert "parser cost" in progress


def test_quick_bench_measures_real_work(quick_run):
    """Not speed: that each figure is a measurement of something that ran."""
    report, _, _ = quick_run
    for n in ("1", "4", "16"):
        assert report["parser_ns"][n]["median"] > 0 and report["pass_floor_ns"][n]["median"] > 0
    assert report["zerolayer_dps"]["median"] > 0 and report["pass_counter_dps"]["median"] > 0
    assert report["xsk_fps"]["median"] > 0 and report["udp_fps"]["median"] > 0
    assert report["delivery_last_round"]["frames_offered"] == report["delivery_frames_offered"]


def test_quick_bench_draws_the_plot(quick_run):
    report, plot, _ = quick_run
    assert report["plot"] == str(plot)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_plot_that_cannot_be_written_is_refused_before_measuring(cli, tmp_path):
    proc = cli("bench", "--quick", "--plot", tmp_path / "missing" / "b.png")
    assert proc.returncode == 2 and "cannot write into" in proc.stderr
    assert "parser cost" not in proc.stdout + proc.stderr


def test_figures_and_targets():
    fig = bench.figure([3, 1, 2])
    assert (fig["median"], fig["min"], fig["max"], fig["rounds"]) == (2, 1, 3, 3)
    report = {"parser_ratio": {"4": bench.figure([2.5])}, "xdp_ratio": bench.figure([0.9]),
              "delivery_ratio": bench.figure([2.4])}
    met = [(t["kind"], t["met"]) for t in bench.targets(report)]
    assert met == [("target", False), ("target", True), ("target", True), ("goal", False)]
