# SPDX-License-Identifier: Apache-2.0
"""Token cadence, timed for real: the lab's peer sends a stream with known
gaps over veth, and the gaps land in the buckets they belong to.

The gaps are chosen in the middle of their log2 buckets (24 ms in
[16.4, 32.8) ms, 90 ms in [65.5, 131) ms), and the expectation is computed
from the gaps the sender actually kept (it timestamps each send), so a late
wake-up of the sender moves the expectation with it; only delivery jitter
of several milliseconds could flip a bucket.
"""

import json
import socket
import threading
import time

import pytest

from pyxdp.proto import datagram, frames
from pyxdp.proto.frames import FrameType
from pyxdp.xdp import flows

pytestmark = pytest.mark.root

T = frames.encode(FrameType.TOKEN, "tok")
REQUEST = frames.encode(FrameType.REQUEST, '{"prompt":"cadence"}')
DONE = frames.encode(FrameType.DONE, "")
PING = frames.encode(FrameType.PING)
SPORT = 40123

# (seconds to wait before sending, datagram payload)
SCHEDULE = [
    (0.0, REQUEST),
    (0.005, T),            # first token of the stream: no sample
    (0.024, T),            # 24 ms
    (0.024, T * 3),        # 24 ms, then two tokens with gap 0
    (0.090, T),            # 90 ms
    (0.012, PING),         # a PING does not reset the clock ...
    (0.012, T),            # ... so this gap is 24 ms
    (0.024, T + DONE),     # 24 ms, then DONE resets
    (0.050, REQUEST + T),  # new stream: no sample for its first token
    (0.090, T),            # 90 ms
    (0.010, DONE),
]


def model_samples(sent: list[tuple[int, bytes]]) -> list[int]:
    """The gap samples (ns) zl_flows.h must record for datagrams sent at
    these times, per its definition."""
    samples, clock = [], None
    for at, payload in sent:
        kinds = [f.type for f in datagram.decode_datagram(payload)]
        if FrameType.REQUEST in kinds:
            clock = None
        tokens = kinds.count(FrameType.TOKEN)
        if tokens:
            if clock is not None:
                samples.append(at - clock)
            samples += [0] * (tokens - 1)
            clock = at
        if FrameType.DONE in kinds:
            clock = None
    return samples


def histogram(samples: list[int]) -> list[int]:
    hist = [0] * len(flows.BUCKET_LE_US)
    for gap in samples:
        hist[flows.gap_bucket(gap)] += 1
    return hist


def send_schedule(lab) -> list[tuple[int, bytes]]:
    with lab.in_peer():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent = []
    try:
        sock.bind((lab.peer.ipv4, SPORT))
        for wait, payload in SCHEDULE:
            time.sleep(wait)
            at = time.monotonic_ns()
            sock.sendto(payload, (lab.dut.ipv4, frames.DEFAULT_PORT))
            sent.append((at, payload))
    finally:
        sock.close()
    return sent


def test_known_gaps_land_in_their_buckets(attached, cli):
    lab = attached
    sent = send_schedule(lab)
    samples = model_samples(sent)
    want = histogram(samples)
    # The schedule is meant to fill 24 ms and 90 ms buckets and bucket 0.
    assert want[flows.gap_bucket(24_000_000)] >= 3 and want[flows.gap_bucket(90_000_000)] >= 2
    assert want[0] == 2

    deadline = time.monotonic() + 2
    while True:
        obs = flows.observe(lab.dut.ifname, lab.dut.netns)
        if sum(f.datagrams for f in obs.flows) == len(SCHEDULE) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    (flow,) = obs.flows
    assert (flow.src_addr, flow.sport, flow.dport, flow.ip_version) == \
        (lab.peer.ipv4, SPORT, frames.DEFAULT_PORT, 4)
    assert flow.datagrams == len(SCHEDULE)
    assert flow.frames["token"] == 10 and flow.frames["request"] == 2 and flow.frames["done"] == 2
    assert list(flow.gaps) == want
    assert obs.gap_hist == want  # the interface's histogram: the only flow
    # The sum is of the real gaps: close to what the sender kept.
    assert abs(flow.gap_sum_ns - sum(samples)) < 2_000_000 * len(samples)

    proc = cli("stats", lab.dut.ifname, "--netns", lab.dut.netns, "--flows", "--json",
               "--window", "0.5", check=True)
    snap = json.loads(proc.stdout)
    assert snap["window_s"] >= 0.5  # the window really elapsed
    assert snap["flow_tracking"] is True and snap["flows_total"] == 1
    (row,) = snap["flows"]
    assert row["src"] == f"{lab.peer.ipv4}:{SPORT}" and row["gap_histogram"] == want
    # 8 samples: 2 at 0, 4 at 24 ms, 2 at 90 ms.
    assert row["gap_samples"] == 8
    assert row["gap_us"] == {"p50": 32768, "p90": 131072, "p99": 131072}
    # The stream is over: its live rate is 0, its average that of the stream.
    assert row["tokens_per_s"] == 0
    assert row["avg_tokens_per_s"] == pytest.approx(
        10 / ((flow.last_ns - flow.first_ns) / 1e9), abs=0.06)


def test_stats_flows_table_for_a_person(attached, cli):
    lab = attached
    send_schedule(lab)
    time.sleep(0.2)
    proc = cli("stats", lab.dut.ifname, "--netns", lab.dut.netns, "--flows", "--top", "1", check=True)
    lines = proc.stdout.splitlines()
    assert "flow tracking on" in lines[0] and "1 of 16,384 flows" in lines[0]
    assert "TOKENS/S over the last 1.0s" in lines[0]
    assert lines[1].split()[:6] == ["SRC", "DPORT", "TOKENS", "TOKENS/S", "AVG/S", "GAP"]
    row = lines[2].split()
    assert row[0] == f"{lab.peer.ipv4}:{SPORT}" and row[2:4] == ["10", "0"]
    assert float(row[4].replace(",", "")) > 0  # the stream's own rate, not 0 as the live one
    assert row[5:8] == ["<32.8ms", "<131ms", "<131ms"]


def test_stats_flows_rate_is_live_while_a_stream_runs(attached, cli):
    lab = attached
    stop = threading.Event()

    def stream():
        with lab.in_peer():
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with sock:
            sock.bind((lab.peer.ipv4, SPORT))
            while not stop.wait(0.01):
                sock.sendto(T, (lab.dut.ipv4, frames.DEFAULT_PORT))

    sender = threading.Thread(target=stream)
    sender.start()
    try:
        time.sleep(0.2)
        proc = cli("stats", lab.dut.ifname, "--netns", lab.dut.netns, "--flows", "--json",
                   "--window", "0.5", check=True)
    finally:
        stop.set()
        sender.join()
    (row,) = json.loads(proc.stdout)["flows"]
    assert row["tokens_per_s"] > 0  # tokens arrived during the window
