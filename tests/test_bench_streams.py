# SPDX-License-Identifier: Apache-2.0
"""The streams section of `zerolayer bench` (what `zerolayer streams` costs
an SSE server and its clients, over plaintext and TLS, and a process that
streams nothing) runs both arms and reports every figure from a real
measurement; what the figures are is for the benchmark to say, not for a
test to assert."""

import shutil
from pathlib import Path

import pytest

from pyxdp.bench.streams import section as streams_bench
from pyxdp.streams import probes as stream_probes
from pyxdp.xdp import compiler, libbpf
from support.bench_helpers import assert_figure, bench_json

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(not shutil.which("openssl"), reason="needs the openssl CLI")]

ROUNDS = 1
TRANSPORT_KEYS = ["saturation_chunks_per_s", "saturation_ratio", "paced_gap_p99_ms",
                  "paced_gap_p99_ratio", "load_cpu_us_per_chunk", "added_us_per_chunk",
                  "observer_cpu_us_per_chunk", "steady_chunks_per_s",
                  "observer_steady_us_per_chunk", "observer_cpu_pct_of_one_cpu",
                  "observer_us_per_stream"]
BY_ARM = ("saturation_chunks_per_s", "paced_gap_p99_ms", "load_cpu_us_per_chunk")


@pytest.fixture(scope="module")
def streams_run(tmp_path_factory):
    plot = tmp_path_factory.mktemp("streams") / "streams.png"
    return bench_json("--section", "streams", "--quick", "--plot", plot) + (plot,)


def test_the_report_has_every_key(streams_run):
    report, progress, plot = streams_run
    assert list(report) == ["machine", "quick", "streams", "targets", "duration_s", "plot"]
    s = report["streams"]
    assert list(s) == ["load", "cpus", "plain", "tls", "idle_process", "observer_saw",
                       "profile", "runs", "loops", "errors"]
    assert s["errors"] == []
    assert s["load"]["rounds"] == ROUNDS
    assert s["load"]["paced_streams"] == streams_bench.QUICK.paced_streams
    # the floor: the plaintext flood under bare tracepoints
    assert list(s["plain"]) == [*TRANSPORT_KEYS[:2], "saturation_floor_ratio",
                                *TRANSPORT_KEYS[2:]]
    assert_figure(s["plain"]["saturation_floor_ratio"], ROUNDS)
    assert list(s["tls"]) == [*TRANSPORT_KEYS, "uprobe_hits_per_chunk", "bound_us_per_chunk",
                              "added_vs_bound"]
    for transport in ("plain", "tls"):
        for key in TRANSPORT_KEYS:
            figs = s[transport][key]
            for fig in (figs.values() if key in BY_ARM else [figs]):
                assert_figure(fig, ROUNDS)
    outside = [f"{k}_outside_{o}_ratio" for k in ("write", "ssl") for o in ("port", "pid")]
    assert list(s["idle_process"]) == ["write_ns", "write_ratio", "write_floor_ratio", "ssl_ns",
                                       "ssl_ratio", "ssl_floor_ratio", "bare_calls_per_turn",
                                       *outside, "uprobe_hit_us"]
    for key in ("write_floor_ratio", "ssl_floor_ratio", *outside):
        assert_figure(s["idle_process"][key], ROUNDS)
    # outside --pid the SSL loop takes no uprobe trap: far below the loop watched
    idle = s["idle_process"]
    assert idle["ssl_outside_pid_ratio"]["median"] < idle["ssl_outside_port_ratio"]["median"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "starting zerolayer streams --json" in progress


def test_every_run_measured_both_arms(streams_run):
    s = streams_run[0]["streams"]
    runs = s["runs"]
    arms = [(r["arm"], r["transport"], r["phase"]) for r in runs]
    assert sorted(arms) == sorted([*((arm, t, p) for arm in streams_bench.ARMS
                                     for t in streams_bench.TRANSPORTS
                                     for p in streams_bench.PHASES),
                                   (streams_bench.FLOOR_ARM, "plain", "flood")])
    for run in runs:
        # every stream read whole by the clients: every chunk the server wrote
        assert run["errors"] == []
        assert run["streams_whole"] == run["streams"]
        assert run["chunks"] == run["server_chunks"] == run["streams"] * run["chunks_per_stream"]
        assert run["server_chunks_per_s"] > 0 and run["gap_p99_ms"] >= run["gap_p50_ms"]
        assert run["cpu_s"]["server"] > 0 and run["cpu_s"]["clients"] > 0
        assert ("observer" in run["cpu_s"]) == (run["arm"] == "observed")
        assert (run["observer"] is None) == (run["arm"] != "observed")
        if run["arm"] == "observed":
            assert run["cpu_s"]["observer"] > 0
        # the observer's CPU in the steady part of each observed paced run
        if run["arm"] == "observed" and run["phase"] == "paced":
            assert run["steady"]["seconds"] > 0 and run["steady"]["server_chunks"] > 0
            assert run["steady"]["observer_cpu_s"] > 0
        else:
            assert run["steady"] is None
    for loop in s["loops"]:
        assert loop["write_ns"] > 0 and loop["ssl_ns"] > 0
    # the bare uprobes were hit, on SSL_write_ex and SSL_read_ex, once a turn each
    bare = next(x for x in s["loops"] if x["arm"] == "unobserved")
    assert bare["bare_calls_per_turn"] >= 2
    assert bare["write_bare_ns"] > 0


def _tracepoints(source: str, flags: tuple[str, ...] = (), directory: Path | None = None):
    """The tracepoints SOURCE's object attaches to, from its programs' sections."""
    with compiler.logged("zerolayer-test-") as log:
        image = compiler.program_object(source, flags, log, directory)
    obj = libbpf.BpfObject(image, source)
    try:
        return sorted(sec for sec in obj.programs().values() if sec.startswith("tracepoint/"))
    finally:
        obj.close()


def test_the_floor_takes_the_observers_tracepoints():
    observer = _tracepoints(stream_probes.SOURCE, stream_probes.build_flags())
    floor = _tracepoints("tracepoint_floor.bpf.c", directory=Path(streams_bench.__file__).parent)
    assert len(observer) >= 18 and floor == observer


def test_the_observer_saw_every_paced_stream(streams_run):
    s = streams_run[0]["streams"]
    paced = [x for x in s["observer_saw"] if x["phase"] == "paced"]
    assert [x["transport"] for x in paced] == ["plain", "tls"]
    for x in paced:
        # both sides of every stream the clients ran, each chunk of them, each ended by [DONE]
        assert x["client_streams"] == x["server_streams"] == x["streams"]
        run = next(r for r in s["runs"] if r["arm"] == "observed"
                   and r["transport"] == x["transport"] and r["phase"] == "paced")
        # Each chunk of them, but for one in 10,000: two runs in about a dozen
        # missed one chunk on one side, and a stress test of the ring reader
        # loses nothing; the cause is open (docs/benchmarks.md#token-streams).
        # More than that fails.
        for side in ("client_chunks", "server_chunks"):
            assert 0 <= run["chunks"] - x[side] <= run["chunks"] // 10_000, (side, x, run)
        assert x["done"] == 2 * x["streams"]
    # a flood outruns the observer here, but no stream stays open: every one
    # ends, on both sides (its close kept by the program when the ring was full)
    for x in s["observer_saw"]:
        if x["phase"] == "flood":
            assert x["client_streams"] == x["server_streams"] == x["streams"]
    # the profile counted the observer's programs: uprobes over TLS only
    assert s["profile"]["plain"]["runs_per_chunk"] > 0
    assert s["profile"]["plain"]["uprobe_hits_per_chunk"] == 0
    assert s["profile"]["tls"]["uprobe_hits_per_chunk"] >= 1


def test_its_targets_join_the_top_level_targets(streams_run):
    report = streams_run[0]
    assert [t["key"] for t in report["targets"]] == [t.key for t in streams_bench.TARGETS]
    assert all(isinstance(t["met"], bool) for t in report["targets"])


def test_the_text_report(streams_run):
    text = streams_bench.SECTION.render(streams_run[0])
    assert "Token streams on loopback" in text
    assert "a process that streams nothing" in text
    assert "one uprobe hit" in text
    assert "under bare tracepoints" in text
    assert "what the observer reported of each observed run" in text
