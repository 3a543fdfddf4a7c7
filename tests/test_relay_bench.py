"""The relay benchmark runs and reports every figure; what the figures are is
for the benchmark to say, not for a test to assert."""

import subprocess
import sys

import pytest

from pyxdp.bench import relay as relay_bench

pytestmark = pytest.mark.root

TINY = relay_bench.Plan(rounds=1, flood_frames=20_000, paced_s=0.1, streams=(1, 4),
                        paced_rate=2_000, quick=True)


def test_the_benchmark_measures_all_three_ways():
    lines = []
    report = relay_bench.run(plan=TINY, progress=lines.append)
    assert report["errors"] == []
    assert len(report["runs"]) == len(TINY.streams) * 2 * len(relay_bench.WAYS)
    for run in report["runs"]:
        expected = TINY.flood_frames // run["streams"] * run["streams"]
        if run["phase"] == "flood":
            assert run["frames"] == expected
        assert run["frames_per_s"] > 0 and run["latency_us"]["p99"] >= run["latency_us"]["p50"]
        assert set(run["cpu_s"]) >= {"generator", "receiver", "host_busy"}
    for streams in ("1", "4"):
        result = report["results"][streams]
        assert set(result["ways"]) == set(relay_bench.WAYS)
        assert set(result["sockmap_ratio"]) == {"throughput_vs_asyncio", "throughput_vs_direct",
                                                "paced_p99_vs_asyncio", "flood_p99_vs_asyncio"}
    assert [t["met"] in (True, False) for t in report["targets"]] == [True] * 4
    # every frame went through the in-kernel relay whole: nothing broke, nothing left over
    assert report["sockmap_relay"]["pairs"]["active"] == 0
    assert sum(report["sockmap_relay"]["malformed"].values()) == 0
    assert any("sockmap" in line for line in lines)


def test_the_module_runs_as_a_script_and_checks_its_arguments():
    proc = subprocess.run([sys.executable, "-m", "pyxdp.bench.relay", "--no-such-option"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage" in proc.stderr
