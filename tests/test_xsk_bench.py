"""The delivery benchmark runs and reports everything it promises. It makes
no claim about speed here: that is for `python -m pyxdp.bench.xsk_vs_udp`."""

import json
import subprocess
import sys

import pytest

from pyxdp.bench import xsk_vs_udp as xsk_bench

pytestmark = pytest.mark.root

FRAMES = 20_000


def _check_consumer(report: dict, kind: str) -> None:
    side = report[kind]
    assert 0 < side["received"] <= FRAMES
    assert side["fps"] > 0 and side["window_s"] > 0 and side["offered_pps"] > 0
    lost = side["lost"]
    assert lost["total"] == FRAMES - side["received"]
    # Every lost frame is explained by a kernel counter.
    assert lost["unexplained"] == 0, lost
    assert sum(v for k, v in lost.items() if k not in ("total", "unexplained")) == lost["total"]


def test_bench_reports_every_key():
    report = xsk_bench.run(FRAMES)
    for key in ("xsk_fps", "udp_fps", "ratio", "frames_offered", "xsk_mode", "udp", "xsk",
                "target_ratio", "goal_ratio", "packet_bytes", "kernel"):
        assert key in report, key
    assert report["frames_offered"] == FRAMES
    assert report["xsk_mode"] == "copy"  # veth: never claimed as zero-copy
    assert report["xsk_fps"] == report["xsk"]["fps"] and report["udp_fps"] == report["udp"]["fps"]
    assert report["ratio"] == round(report["xsk_fps"] / report["udp_fps"], 2)
    _check_consumer(report, "udp")
    _check_consumer(report, "xsk")
    assert set(report["udp"]["lost"]) == {"before_xdp", "socket_buffer_full", "other_udp_errors",
                                          "total", "unexplained"}
    assert set(report["xsk"]["lost"]) == {"before_xdp", "not_redirected", "rx_ring_full",
                                          "fill_ring_empty", "other_rx_dropped", "total",
                                          "unexplained"}
    json.dumps(report)  # plain data, for `zerolayer bench --json`


def test_bench_entry_point_prints_json(tmp_path):
    # Not from the repository root, where `-m` would import the source tree.
    proc = subprocess.run([sys.executable, "-m", "pyxdp.bench.xsk_vs_udp", str(FRAMES)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["frames_offered"] == FRAMES
