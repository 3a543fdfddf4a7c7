"""The relay section of `zerolayer bench` (sockmap relay against the
asyncio relay and a direct connection, on loopback) runs and reports every
figure; what the figures are is for the benchmark to say, not for a test to
assert."""

import pytest

from bench_helpers import bench_json
from pyxdp.bench import relay as relay_bench

pytestmark = pytest.mark.root

STREAMS = (1, 4)
FLOOD = 20_000


@pytest.fixture(scope="module")
def relay_run(tmp_path_factory):
    plot = tmp_path_factory.mktemp("relay") / "relay.png"
    streams = [arg for n in STREAMS for arg in ("--relay-streams", n)]
    report, progress = bench_json("--section", "relay", "--quick", *streams,
                                  "--relay-frames", FLOOD, "--plot", plot)
    return report, progress, plot


def test_the_section_measures_all_three_ways(relay_run):
    report, progress, _ = relay_run
    assert list(report) == ["machine", "quick", "relay", "targets", "duration_s", "plot"]
    relay = report["relay"]
    assert list(relay) == ["load", "results", "sockmap_relay", "errors", "runs"]
    assert relay["errors"] == []
    assert relay["load"]["streams"] == list(STREAMS)
    assert relay["load"]["flood_frames"] == FLOOD and relay["load"]["rounds"] == 1
    assert len(relay["runs"]) == len(STREAMS) * 2 * len(relay_bench.WAYS)
    for run in relay["runs"]:
        if run["phase"] == "flood":
            assert run["frames"] == FLOOD // run["streams"] * run["streams"]
        assert run["frames_per_s"] > 0 and run["latency_us"]["p99"] >= run["latency_us"]["p50"]
        assert set(run["cpu_s"]) >= {"generator", "receiver", "host_busy"}
    for streams in map(str, STREAMS):
        result = relay["results"][streams]
        assert set(result["ways"]) == set(relay_bench.WAYS)
        assert set(result["sockmap_ratio"]) == {"throughput_vs_asyncio", "throughput_vs_direct",
                                                "paced_p99_vs_asyncio", "flood_p99_vs_asyncio"}
    # every frame went through the in-kernel relay whole: nothing broke, nothing left over
    assert relay["sockmap_relay"]["pairs"]["active"] == 0
    assert sum(relay["sockmap_relay"]["malformed"].values()) == 0
    assert "sockmap" in progress and "parser cost" not in progress


def test_its_targets_join_the_top_level_targets(relay_run):
    report, _, _ = relay_run
    keys = [t["key"] for t in report["targets"]]
    assert keys == [f"relay.results.{n}.sockmap_ratio.{ratio}" for n in STREAMS
                    for ratio in ("throughput_vs_asyncio", "paced_p99_vs_asyncio")]
    assert all(t["kind"] == "target" and isinstance(t["met"], bool) for t in report["targets"])


def test_the_plot_has_a_relay_panel(relay_run):
    report, _, plot = relay_run
    assert report["plot"] == str(plot)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_text_report(cli):
    proc = cli("bench", "--section", "relay", "--quick", "--relay-streams", "1",
               "--relay-frames", "5000")
    assert proc.returncode == 0, proc.stderr
    assert "1. TCP relay on loopback" in proc.stdout
    assert "sockmap/asyncio" in proc.stdout
    assert "target frames/s through the sockmap relay against the asyncio relay, 1 stream" \
        in proc.stdout
