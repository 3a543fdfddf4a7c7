# SPDX-License-Identifier: Apache-2.0
"""The delivery section of `zerolayer bench` (pyxdp's AF_XDP socket against a
UDP socket at three tiers of work per frame, and against a C consumer on
libxdp) runs and reports every tier it promises, with every frame of every
tier walked and every lost frame explained. It makes no claim about speed
here: that is for the benchmark to say."""

import os

import pytest

from pyxdp.bench.delivery.section import delivery_keys
from pyxdp.bench.delivery.tiers import TIERS
from support.bench_helpers import DELIVERY_KEYS, assert_figure, bench_json

pytestmark = pytest.mark.root

FRAMES = 20_000
RUNS = ["udp_count", "xsk_count", "udp_touch", "xsk_touch", "c_touch", "udp_act", "xsk_act"]


@pytest.fixture(scope="module")
def delivery():
    return bench_json("--section", "delivery", "--quick", "--rounds", "2",
                      "--delivery-frames", FRAMES)


def test_the_section_reports_every_tier_and_nothing_else(delivery):
    report, progress = delivery
    assert list(report) == ["machine", "quick", *DELIVERY_KEYS, "targets", "duration_s"]
    assert report["delivery_frames_offered"] == FRAMES
    for tier in TIERS:
        for key in delivery_keys(tier).values():
            assert_figure(report[key], 2)
        assert report[delivery_keys(tier)["xsk"]]["median"] > 0
        assert report[delivery_keys(tier)["udp"]]["median"] > 0
    for key in ("c_touch_fps", "xsk_touch_vs_c_ratio", "c_touch_lost"):
        assert_figure(report[key], 2)
    assert report["xsk_mode"] == "copy"  # veth: never claimed as zero-copy
    c = report["c_consumer"]
    assert c["skipped"] is None and c["mode"] == "copy" and c["compiler"]
    assert [(t["key"], t["kind"]) for t in report["targets"]] == [
        ("delivery_touch_ratio", "target"), ("delivery_touch_ratio", "goal"),
        ("xsk_touch_vs_c_ratio", "target")]
    assert "delivery into Python: 2 rounds of 20,000 datagrams" in progress
    assert "parser cost" not in progress


def test_rounds_alternate_the_order_of_the_consumers(delivery):
    report, _ = delivery
    last = report["delivery_last_round"]
    # the second round runs each tier's consumers in the first round's reverse order
    assert last["order"] == ["xsk_count", "udp_count", "c_touch", "xsk_touch", "udp_touch",
                             "xsk_act", "udp_act"]
    assert sorted(last["runs"]) == sorted(RUNS)


def _check_run(run: dict) -> None:
    assert 0 < run["received"] <= FRAMES
    assert run["fps"] > 0 and run["window_s"] > 0 and run["offered_pps"] > 0
    assert run["limited_by"] in ("sender", "consumer")
    lost = run["lost"]
    assert lost["total"] == FRAMES - run["received"]
    # Every lost frame is explained by a kernel counter.
    assert lost["unexplained"] == 0, lost
    assert sum(v for k, v in lost.items() if k not in ("total", "unexplained")) == lost["total"]


def test_every_run_of_the_last_round_explains_every_loss(delivery):
    report, _ = delivery
    last = report["delivery_last_round"]
    for key in ("frames_offered", "packet_bytes", "flows", "xsk_mode", "xdp_mode", "runs",
                "cpus", "kernel"):
        assert key in last, key
    assert last["frames_offered"] == FRAMES
    for name, run in last["runs"].items():
        _check_run(run)
        side = name.split("_")[0]
        if side == "udp":
            assert set(run["lost"]) == {"before_xdp", "socket_buffer_full", "other_udp_errors",
                                        "total", "unexplained"}
        else:
            assert set(run["lost"]) == {"before_xdp", "not_redirected", "rx_ring_full",
                                        "fill_ring_empty", "other_rx_dropped", "total",
                                        "unexplained"}
    assert report["xsk_touch_fps"]["values"][-1] == round(last["runs"]["xsk_touch"]["fps"], 4)


def test_every_tier_did_its_work_on_every_frame_received(delivery):
    """The bench itself stops when a tier skips a frame; this reads what it
    reports: frames walked equal datagrams received (one frame each), and
    the act tier's streams are one per flow, holding every token."""
    runs = delivery[0]["delivery_last_round"]["runs"]
    flows = delivery[0]["delivery_last_round"]["flows"]
    for side in ("udp", "xsk"):
        assert "frames_walked" not in runs[f"{side}_count"]  # count reads no frame
        for tier in ("touch", "act"):
            run = runs[f"{side}_{tier}"]
            assert run["frames_walked"] == run["received"]
        act = runs[f"{side}_act"]
        assert act["tokens_appended"] == act["received"] and act["flows"] == flows
        assert runs[f"{side}_touch"]["tokens_appended"] == 0
    for tier in ("count", "touch", "act"):  # the sizes of the AF_XDP consumer's batches
        sizes = runs[f"xsk_{tier}"]["batch_sizes"]
        assert sizes["batches"] >= 1 and 1 <= sizes["p10"] <= sizes["p50"] <= sizes["max"]
        assert sizes["mean"] * sizes["batches"] >= runs[f"xsk_{tier}"]["received"] * 0.99
    c = runs["c_touch"]
    assert c["frames_walked"] == c["frame_types"]["token"] == c["received"]
    assert c["malformed"] == 0


def test_without_a_compiler_the_c_tier_is_skipped_with_a_note(cli, tmp_path):
    """The text report, with no compiler on PATH: every tier of pyxdp and
    the UDP socket, and a note where the C consumer would be."""
    from pyxdp.lab import generator

    if not generator.live_frames():
        pytest.skip(generator.no_live_frames())
    env = {**os.environ, "PATH": str(tmp_path)}  # an empty directory
    proc = cli("bench", "--section", "delivery", "--quick", "--rounds", "1",
               "--delivery-frames", "5000", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = [ln.split()[:2] for ln in proc.stdout.splitlines() if ln.split()[:1] in (["count"],
            ["touch"], ["act"])]
    assert [r[0] for r in rows] == ["count"] * 3 + ["touch"] * 3 + ["act"] * 3
    assert "LIMITED BY (LAST ROUND)" in proc.stdout
    assert "C on libxdp" not in proc.stdout
    assert "C consumer skipped: no C compiler (cc, gcc, clang) on PATH" in proc.stdout
    assert "pyxdp against a C consumer" not in proc.stdout  # no target without its figure
    assert "target delivery into Python, every frame touched, AF_XDP against a UDP socket" \
        in proc.stdout
