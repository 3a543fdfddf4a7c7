# SPDX-License-Identifier: Apache-2.0
"""The latency section of `zerolayer bench` (one-way latency at token
cadence: a paced C sender's stamp inside each frame to the consumer's read,
AF_XDP and a UDP socket, each with and without busy polling) runs, reports
every path and load, accounts for every frame sent, and reads the stamps
the sender writes. What the latencies are, and whether a loaded machine
loses frames at 50,000 a second, is for the benchmark to say (its target
is nothing lost): no test here asserts a time or a rate."""

import time

import numpy as np
import pytest

from pyxdp.bench.latency import PATHS, sender
from pyxdp.bench.latency.consumer import UdpConsumer
from pyxdp.bench.latency.section import LATENCIES, QUICK, RATIOS, SCOPE_NOTE
from pyxdp.bench.latency.stats import percentiles
from pyxdp.lab.veth_lab import Lab
from support.bench_helpers import assert_figure, bench_json

LOADS = [load.name for load in QUICK.loads]
KEYS = {"p50_us", "p99_us", "p999_us", "max_us", "sent", "received", "cpu_per_frame_us"}


@pytest.fixture(scope="module")
def latency():
    return bench_json("--section", "latency", "--quick")


@pytest.mark.root
def test_every_path_and_load_reports_and_counts_what_it_lost(latency):
    report, progress = latency
    assert list(report) == ["machine", "quick", "latency", "latency_ratio",
                            "latency_ratio_on_time", "latency_lost",
                            "latency_load", "latency_runs", "latency_notes", "targets",
                            "duration_s"]
    assert list(report["latency"]) == list(PATHS)
    for path, by_load in report["latency"].items():
        assert list(by_load) == LOADS, path
        for load in QUICK.loads:
            entry = by_load[load.name]
            assert set(entry) == KEYS
            assert entry["sent"] == load.frames, (path, load.name)
            assert 0 < entry["received"] <= entry["sent"], (path, load.name)
            for key in (*LATENCIES, "cpu_per_frame_us"):
                assert_figure(entry[key], 1)
            medians = [entry[key]["median"] for key in LATENCIES]
            assert 0 < medians[0] and medians == sorted(medians), (path, load.name, medians)
    assert report["latency_lost"]["median"] == sum(r["lost"] for r in report["latency_runs"])
    assert "latency: 1 round of 1x50 for 2 s, 1000x50 for 1 s per path" in progress


@pytest.mark.root
def test_each_run_is_a_path_and_a_load_with_its_sender_and_socket(latency):
    report, _ = latency
    runs = report["latency_runs"]
    assert [(r["load"], r["path"]) for r in runs] == [(ld, p) for ld in LOADS for p in PATHS]
    for run in runs:
        assert run["lost"] == run["sent"] - run["received"] >= 0
        assert run["p50_us"] <= run["p99_us"] <= run["p999_us"] <= run["max_us"]
        assert run["sender"]["send_errors"] == 0 and run["sender"]["frames_per_s"] > 0
        assert run["consumer"]["reads"] >= 1 and run["busy_poll_rx_packets"] >= 0
        if run["path"].startswith("af_xdp"):  # XDP takes every frame before UDP sees it
            assert run["udp_rcvbuf_errors"] == 0
        sock = run["consumer"]["socket"]
        assert (sock["busy_poll"] is not None) == run["path"].endswith("busy_poll")
        if run["path"].startswith("af_xdp"):
            assert sock["mode"] == "copy"  # veth
    assert [(t["key"], t["kind"]) for t in report["targets"]] == [
        ("latency_ratio.af_xdp_vs_udp_p99.1000x50", "target"),
        ("latency_ratio.af_xdp_vs_udp_p99.1000x50", "goal"),
        ("latency_ratio.busy_poll_vs_af_xdp_p99.1x50", "target"),
        ("latency_lost", "target")]
    for name in RATIOS:
        assert list(report["latency_ratio"][name]) == LOADS
        assert list(report["latency_ratio_on_time"][name]) == LOADS
    assert report["latency_notes"][0] == SCOPE_NOTE
    late = [n for n in report["latency_notes"] if "the sender was late" in n]
    assert [n.split(":")[0] for n in late] == LOADS
    assert report["latency_load"]["loads"]["1000x50"]["frames_per_s"] == 50_000


@pytest.mark.root
def test_the_consumer_reads_the_stamps_the_sender_writes():
    """The C sender's datagrams, read by the UDP consumer on a veth lab with
    no XDP program: one latency per frame, each between the sender's stamp
    and the read, so never below 0 nor above the time the whole exchange
    took (a stamp read at the wrong offset or byte order would be either)."""
    streams, rate, seconds = 3, 50, 0.2
    expected = streams * int(rate * seconds)
    with sender.built() as (binary, _), Lab() as lab:
        consumer = UdpConsumer(lab.dut.netns, lab.dut.ipv4)
        try:
            start = time.monotonic_ns()
            sent = sender.send(binary, lab, streams=streams, rate=rate, seconds=seconds,
                               cpu=None)
            run = consumer.consume(expected, lambda: True)  # the sender is done
            elapsed = time.monotonic_ns() - start
        finally:
            consumer.close()
    assert sent["sent"] == expected and sent["send_errors"] == 0
    latency = np.asarray(run.latency_ns)
    assert len(latency) == run.result()["received"] == expected
    assert latency.min() >= 0 and latency.max() <= elapsed


def test_percentiles_are_nearest_ranks_in_microseconds():
    ns = np.arange(1, 1001, dtype=np.int64) * 1000  # 1 .. 1000 us
    np.random.default_rng(7).shuffle(ns)
    assert percentiles(ns) == {"p50_us": 500.0, "p99_us": 990.0, "p999_us": 999.0,
                               "max_us": 1000.0}
    hundred = np.arange(1, 101, dtype=np.int64) * 1000
    assert percentiles(hundred) == {"p50_us": 50.0, "p99_us": 99.0, "p999_us": 100.0,
                                    "max_us": 100.0}
    assert percentiles(np.array([7000], np.int64)) == dict.fromkeys(
        ("p50_us", "p99_us", "p999_us", "max_us"), 7.0)
    assert percentiles(np.array([], np.int64)) == dict.fromkeys(
        ("p50_us", "p99_us", "p999_us", "max_us"), 0.0)
