# SPDX-License-Identifier: Apache-2.0
"""What `zerolayer listen` prints, without a socket: the JSON lines made a
batch at a time (byte for byte json.dumps of docs/spec.md §5.7's record),
and the end-of-listen report's loss reasons."""

import base64
import json

import pytest

from pyxdp.proto import datagram, judge
from pyxdp.proto.frames import FrameType, encode
from pyxdp.xsk import records, sizing
from pyxdp.xsk.afxdp import XskStatistics
from pyxdp.xsk.listen_report import ListenReport, QueueReport, QueueTally
from support.packets import build, token_frames
from support.synthetic_umem import batch_of

AWKWARD = [
    b"", b"hello", "café ☕".encode(), "\U0001F600 beyond the BMP".encode(),
    b'quote " backslash \\ slash /', b"\x00\x01\x1f\x7f control", b"tab\tnew\nline\r",
    "\u2028\u2029".encode(), b"\xff\xfe not utf-8 \x80", b"\xc3\x28", b"\xed\xa0\x80",  # a surrogate
    '{"prompt": "json inside"}'.encode(), bytes(range(256)),
]


def reference_line(src, dst, ftype, payload, queue) -> str:
    record = {"src": src, "dst": dst, "type": ftype.label}
    try:
        record["payload"] = payload.decode("utf-8")
    except UnicodeDecodeError:
        record["payload_b64"] = base64.b64encode(payload).decode()
    record["queue"] = queue
    return json.dumps(record) + "\n"


@pytest.mark.parametrize("queue", [0, 17])
def test_json_lines_are_what_json_dumps_prints(queue):
    types = list(FrameType)
    payloads = [b"".join(encode(types[i % 5], body) for body in AWKWARD[i:i + 3])
                for i in range(len(AWKWARD))]
    packets = [build(p, family=4 + 2 * (i % 2)) for i, p in enumerate(payloads)]
    batch = batch_of(packets)
    lines = records.json_lines(batch.frames(), batch.sources(), batch.destinations(), queue)
    want = [reference_line(batch.source(i), batch.destination(i), f.type, f.payload, queue)
            for i, p in enumerate(packets)
            for f in datagram.decode_datagram(judge.classify_packet(p).payload)]
    assert lines == want
    assert any('"payload_b64"' in line for line in lines)
    assert any(line.startswith('{"src": "[fd00:7a1::2]:40000"') for line in lines)


def test_a_cut_batch_prints_only_its_head():
    packets = [build(token_frames(("token", "a"), ("token", "b"), ("done", "")))] * 2
    batch = batch_of(packets)
    lines = records.json_lines(batch.frames().head(4), batch.sources(), batch.destinations(), 0)
    assert [json.loads(line)["payload"] for line in lines] == ["a", "b", "", "a"]


def stats(**counts) -> XskStatistics:
    return XskStatistics(**counts)


def test_copy_mode_losses_by_reason():
    """Copy mode counts a frame lost for want of a chunk in both
    rx_fill_ring_empty_descs and rx_dropped; the rest of rx_dropped is
    frames longer than a chunk."""
    st = stats(rx_dropped=7, rx_ring_full=5, rx_fill_ring_empty_descs=4)
    assert st.lost_by_reason("copy") == {"rx_ring_full": 5, "no_free_chunk": 4, "too_long": 3}
    assert sum(st.lost_by_reason("copy").values()) == st.lost == 12
    # zero-copy: the driver drops what it has no chunk for, unseen by the socket
    assert st.lost_by_reason("zerocopy") == {"rx_ring_full": 5, "no_free_chunk": None,
                                             "too_long": 7}


def test_the_report_adds_queues_up_and_says_why():
    sizing_ = {"frames": 64, "chunk_size": 2048, "ring_size": 64,
               "bytes_per_queue": sizing.memory_bytes(64, 2048, 64)}
    report = ListenReport("dut0", None, "copy", sizing_, [
        QueueReport(0, "copy", QueueTally(datagrams=10, frames=20), stats()),
        QueueReport(1, "copy", QueueTally(datagrams=5, frames=6, unread=2),
                    stats(rx_dropped=3, rx_fill_ring_empty_descs=3, rx_ring_full=1)),
    ])
    out = report.to_json()
    assert list(out) == ["interface", "netns", "mode", "frames", "datagrams", "lost", "broken",
                         "unread", "sizing", "busy_poll", "queues"]
    assert (out["frames"], out["datagrams"], out["lost"], out["unread"]) == (26, 15, 4, 2)
    assert out["queues"][1]["lost_by_reason"] == {"rx_ring_full": 1, "no_free_chunk": 3,
                                                  "too_long": 0}
    assert list(out["queues"][0]) == ["queue", "frames", "datagrams", "lost", "lost_by_reason",
                                      "broken", "unread", "statistics"]
    text = report.text("dut0 queues 0-1")
    assert text.startswith("26 frames in 15 datagrams on dut0 queues 0-1, copy mode; "
                           "4 lost by the AF_XDP sockets; "
                           "queue 1 lost 4 (rx_ring_full 1, no_free_chunk 3); 2 datagrams")


@pytest.mark.parametrize("value,ok", [(64, True), (32768, True), (1 << 20, True), (32, False),
                                      (1000, False), (1 << 21, False), (0, False), (-64, False)])
def test_sizes_are_powers_of_two_in_range(value, ok):
    assert (sizing.problem(value) is None) == ok


def test_the_default_sizing_costs_what_help_says():
    per_queue = sizing.memory_bytes(sizing.DEFAULT_FRAMES, 2048, sizing.DEFAULT_RING_SIZE)
    assert per_queue == 64 * 2**20 + 512 * 2**10 + 512 * 2**10
    assert sizing.mib(per_queue) == "65 MiB"
    assert sizing.DEFAULT_FRAMES >= 20_000 and sizing.DEFAULT_RING_SIZE >= 20_000
