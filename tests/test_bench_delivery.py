"""The delivery section of `zerolayer bench` (AF_XDP against a UDP socket)
runs and reports everything it promises, with every lost frame explained.
It makes no claim about speed here: that is for the benchmark to say."""

import pytest

from bench_helpers import assert_figure, bench_json

pytestmark = pytest.mark.root

FRAMES = 20_000


@pytest.fixture(scope="module")
def delivery():
    return bench_json("--section", "delivery", "--quick", "--rounds", "1",
                      "--delivery-frames", FRAMES)


def _check_consumer(last: dict, kind: str) -> None:
    side = last[kind]
    assert 0 < side["received"] <= FRAMES
    assert side["fps"] > 0 and side["window_s"] > 0 and side["offered_pps"] > 0
    lost = side["lost"]
    assert lost["total"] == FRAMES - side["received"]
    # Every lost frame is explained by a kernel counter.
    assert lost["unexplained"] == 0, lost
    assert sum(v for k, v in lost.items() if k not in ("total", "unexplained")) == lost["total"]


def test_the_section_reports_its_keys_and_nothing_else(delivery):
    report, progress = delivery
    assert list(report) == ["machine", "quick", "xsk_mode", "delivery_frames_offered", "xsk_fps",
                            "udp_fps", "delivery_ratio", "xsk_lost", "udp_lost",
                            "delivery_last_round", "targets", "duration_s"]
    assert report["delivery_frames_offered"] == FRAMES
    for key in ("xsk_fps", "udp_fps", "delivery_ratio", "xsk_lost", "udp_lost"):
        assert_figure(report[key], 1)
    assert report["xsk_mode"] == "copy"  # veth: never claimed as zero-copy
    assert [(t["key"], t["kind"]) for t in report["targets"]] == [
        ("delivery_ratio", "target"), ("delivery_ratio", "goal")]
    assert "delivery into Python: 1 rounds of 20,000 datagrams" in progress
    assert "parser cost" not in progress


def test_the_last_round_explains_every_loss(delivery):
    report, _ = delivery
    last = report["delivery_last_round"]
    for key in ("xsk_fps", "udp_fps", "ratio", "frames_offered", "xsk_mode", "udp", "xsk",
                "target_ratio", "goal_ratio", "packet_bytes", "kernel"):
        assert key in last, key
    assert last["frames_offered"] == FRAMES
    assert last["xsk_fps"] == last["xsk"]["fps"] and last["udp_fps"] == last["udp"]["fps"]
    assert last["ratio"] == round(last["xsk_fps"] / last["udp_fps"], 2)
    assert report["xsk_fps"]["values"] == [round(last["xsk_fps"], 4)]
    _check_consumer(last, "udp")
    _check_consumer(last, "xsk")
    assert set(last["udp"]["lost"]) == {"before_xdp", "socket_buffer_full", "other_udp_errors",
                                        "total", "unexplained"}
    assert set(last["xsk"]["lost"]) == {"before_xdp", "not_redirected", "rx_ring_full",
                                        "fill_ring_empty", "other_rx_dropped", "total",
                                        "unexplained"}
