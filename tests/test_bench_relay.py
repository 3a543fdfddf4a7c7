# SPDX-License-Identifier: Apache-2.0
"""The relay section of `zerolayer bench` (the sockmap relay against the
asyncio relay, the peers socat, haproxy and a splice relay, and a direct
connection, on loopback) runs and reports every figure; what the figures
are is for the benchmark to say, not for a test to assert. A peer that
cannot run is skipped with a note."""

import json
import shutil
import sys

import pytest

from pyxdp.bench.relay import section as relay_bench
from support.bench_helpers import FIGURE_KEYS, bench_json
from support.cli_runner import run_cli

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


PEERS_HERE = shutil.which("socat") and shutil.which("haproxy") and shutil.which("cc")


@pytest.mark.skipif(not PEERS_HERE, reason="needs socat, haproxy and cc (vagrant/provision.sh)")
def test_the_section_measures_every_engine(relay_run):
    report, progress, _ = relay_run
    assert list(report) == ["machine", "quick", "relay", "targets", "duration_s", "plot"]
    relay = report["relay"]
    assert list(relay) == ["load", "results", "cadence", "sockmap_relay", "errors", "runs",
                           "engines", "skipped", "sockmap_profile", "write_sizes"]
    assert relay["errors"] == [] and relay["skipped"] == {}
    assert relay["load"]["streams"] == list(STREAMS)
    assert relay["load"]["flood_frames"] == FLOOD and relay["load"]["rounds"] == 1
    sizes = relay_bench.QUICK.write_sizes
    assert relay["load"]["write_sizes"] == list(sizes)
    assert len(relay["runs"]) == (len(STREAMS) * 2 * len(relay_bench.ENGINES)
                                  + len(relay_bench.CADENCE_ENGINES)
                                  + len(sizes) * len(relay_bench.SWEEP_ENGINES))
    for run in relay["runs"]:
        if run["phase"] in ("flood", "write_size"):
            assert run["frames"] == FLOOD // run["streams"] * run["streams"]
        if run["phase"] == "cadence":
            assert run["streams"] == relay_bench.QUICK.cadence_streams
            assert run["frames"] > 0 and run["host_cpu_per_frame_us"] > 0
        assert run["frames_per_s"] > 0 and run["latency_us"]["p99"] >= run["latency_us"]["p50"]
        assert set(run["cpu_s"]) >= {"generator", "receiver", "host_busy"}
    for streams in map(str, STREAMS):
        result = relay["results"][streams]
        assert set(result["ways"]) == set(relay_bench.ENGINES)
        assert set(result["sockmap_ratio"]) == {"throughput_vs_asyncio", "throughput_vs_direct",
                                                "paced_p99_vs_asyncio", "flood_p99_vs_asyncio",
                                                "throughput_vs_best_peer", "paced_p99_vs_haproxy",
                                                "throughput_vs_unframed"}
        # the ceiling: sockmap with no framing at all, against the same best peer
        assert set(result["unframed_ratio"]) == {"throughput_vs_best_peer"}
        assert result["best_peer"] in relay_bench.PEERS
    # the gateway's cadence: many slow streams through sockmap, asyncio and haproxy,
    # and the bare redirect (sockmap unframed)
    cadence = relay["cadence"]
    assert list(cadence["ways"]) == list(relay_bench.CADENCE_ENGINES)
    for f in cadence["ways"].values():
        assert f["p99_us"]["median"] >= f["p50_us"]["median"] > 0
        assert f["host_cpu_per_frame_us"]["median"] > 0
    assert set(cadence["sockmap_ratio"]) == {"p99_vs_haproxy", "cpu_per_frame_vs_haproxy"}
    assert set(cadence["unframed_ratio"]) == {"p99_vs_haproxy", "cpu_per_frame_vs_haproxy",
                                              "p99_vs_sockmap", "cpu_per_frame_vs_sockmap"}
    # the write-size sweep: a 1-stream flood per size through every engine but asyncio
    assert sorted(r["batch"] for r in relay["runs"] if r["phase"] == "write_size") == sorted(
        size for size in sizes for _ in relay_bench.SWEEP_ENGINES)
    assert list(relay["write_sizes"]) == [str(size) for size in sizes]
    for sweep in relay["write_sizes"].values():
        assert list(sweep["ways"]) == list(relay_bench.SWEEP_ENGINES)
        assert all(set(f) == FIGURE_KEYS for f in sweep["ways"].values())
        assert set(sweep["sockmap_ratio"]) == {"throughput_vs_best_peer", "throughput_vs_unframed"}
        assert set(sweep["unframed_ratio"]) == {"throughput_vs_best_peer"}
        assert sweep["best_peer"] in relay_bench.PEERS
    # one entry per engine and stream count, each figure a median of its rounds
    assert [(e["engine"], e["streams"]) for e in relay["engines"]] == [
        (engine, n) for n in STREAMS for engine in relay_bench.ENGINES]
    for entry in relay["engines"]:
        for key in ("frames_per_s", "paced_p50_us", "paced_p99_us", "flood_p99_us"):
            assert set(entry[key]) == FIGURE_KEYS and entry[key]["rounds"] == 1
    # where the sockmap relay's kernel time went: both programs ran, per frame
    for streams in map(str, STREAMS):
        profile = relay["sockmap_profile"][streams]
        assert profile["errors"] == []
        for prog in ("zl_sk_parser", "zl_sk_verdict"):
            p = profile["programs"][prog]
            assert p["runs"] > 0 and p["ns_per_run"] > 0 and p["frames_per_run"] >= 1
    # every frame went through the in-kernel relay whole: nothing broke, nothing left over
    assert relay["sockmap_relay"]["pairs"]["active"] == 0
    assert sum(relay["sockmap_relay"]["malformed"].values()) == 0
    assert "sockmap" in progress and "parser cost" not in progress


@pytest.mark.skipif(not PEERS_HERE, reason="needs socat, haproxy and cc (vagrant/provision.sh)")
def test_its_targets_join_the_top_level_targets(relay_run):
    report, _, _ = relay_run
    keys = [(t["kind"], t["key"]) for t in report["targets"]]
    expected = []
    for n in STREAMS:
        ratio = f"relay.results.{n}.sockmap_ratio."
        expected += [("target", ratio + "throughput_vs_asyncio"),
                     ("target", ratio + "paced_p99_vs_asyncio")]
        if str(n) in relay_bench.PEER_TARGET_STREAMS:
            expected += [("target", ratio + "throughput_vs_best_peer"),
                         ("goal", ratio + "throughput_vs_best_peer"),
                         ("target", ratio + "paced_p99_vs_haproxy")]
    expected += [("target", "relay.cadence.sockmap_ratio.p99_vs_haproxy"),
                 ("target", "relay.cadence.sockmap_ratio.cpu_per_frame_vs_haproxy")]
    assert keys == expected
    assert all(isinstance(t["met"], bool) for t in report["targets"])


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
    assert "sockmap/sockmap_unframed" in proc.stdout
    assert "target frames/s through the sockmap relay against the asyncio relay, 1 stream" \
        in proc.stdout
    assert "zl_sk_parser" in proc.stdout  # the profile
    assert "write sizes, 1 stream flooding" in proc.stdout  # the sweep
    assert "the gateway's cadence: 200 streams at 20 frames/s each" in proc.stdout
    assert "sockmap_unframed/haproxy" in proc.stdout


def test_missing_peers_are_skipped_with_a_note(tmp_path):
    # No socat, no haproxy and no compiler on PATH:
    # the section still measures zerolayer's engines, and says what it left out.
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "HOME": str(tmp_path),
           "PYTHONPATH": ":".join(sys.path)}
    proc = run_cli("bench", "--json", "--section", "relay", "--quick", "--relay-streams", "1",
                   "--relay-frames", "5000", env=env)
    assert proc.returncode == 0, proc.stderr
    relay = json.loads(proc.stdout)["relay"]
    assert relay["skipped"] == {"splice": "no C compiler (cc, gcc, clang) on PATH: the splice "
                                          "relay cannot be built",
                                "socat": "socat is not installed",
                                "haproxy": "haproxy is not installed"}
    assert set(relay["results"]["1"]["ways"]) == {"sockmap", "sockmap_unframed", "asyncio",
                                                  "direct"}
    assert relay["results"]["1"]["unframed_ratio"] == {}
    # no haproxy: the cadence runs still compare zerolayer's two and the bare
    # redirect, with no ratio to haproxy
    assert list(relay["cadence"]["ways"]) == ["sockmap", "asyncio", "sockmap_unframed"]
    assert relay["cadence"]["sockmap_ratio"] == {}
    assert set(relay["cadence"]["unframed_ratio"]) == {"p99_vs_sockmap",
                                                       "cpu_per_frame_vs_sockmap"}
    assert relay["results"]["1"]["best_peer"] is None
    for sweep in relay["write_sizes"].values():
        assert list(sweep["ways"]) == ["sockmap", "sockmap_unframed", "direct"]
        assert set(sweep["sockmap_ratio"]) == {"throughput_vs_unframed"}
        assert sweep["unframed_ratio"] == {} and sweep["best_peer"] is None
    assert "skipped socat: socat is not installed" in proc.stderr
