# SPDX-License-Identifier: Apache-2.0
"""Batch.frames() on real AF_XDP sockets: datagrams redirected by zerolayer's
XDP program on a veth lab, walked a batch at a time, and held to the
reference decoder for every datagram received. tests/test_frame_arrays.py
holds the same walk to the judge on synthetic UMEM, malformed input included."""

import random

import numpy as np
import pytest

from pyxdp.lab import traffic
from pyxdp.lab.generator import Mix
from pyxdp.proto import counters, datagram, frames, judge
from pyxdp.xdp import stats
from pyxdp.xsk.socket import XskSocket
from support.packets import flip_payload_byte, random_token_packet, random_token_payload
from support.xdp_helpers import live_generator

pytestmark = pytest.mark.root

SRC4, DST4, SRC6, DST6 = "198.18.0.2", "198.18.0.1", "[fd00:7a1::2]", "[fd00:7a1::1]"
BIG = {"frames": 1 << 15, "rx_size": 1 << 15}  # holds everything a test sends, unread


@pytest.fixture(scope="module")
def attached(module_lab):
    """One lab for the module: its tests read counter deltas."""
    return module_lab


def random_packets(seed: int, count: int, budget: int = 1400) -> list[tuple[int, bytes]]:
    """(IP version, packet) of token datagrams addressed as the lab's are
    (tests/support/packets.py uses the lab's MACs and addresses)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        family = rng.choice([4, 6])
        out.append((family, random_token_packet(rng, random_token_payload(rng, budget), family)))
    return out


def received(sock: XskSocket, expect: int, batch_size: int) -> list[tuple]:
    """Every datagram of the next EXPECT as (source, destination, frames as
    walked, frames as the reference decodes the same bytes), batch by batch."""
    out: list[tuple] = []
    while len(out) < expect:
        with sock.recv(batch_size, timeout=5) as batch:
            assert batch, f"{len(out)} of {expect} datagrams arrived"
            arrays = batch.frames()
            assert not len(arrays.broken)
            walked: list[list] = [[] for _ in range(len(batch))]
            for j, (d, (ftype, view)) in enumerate(zip(arrays.datagram.tolist(), arrays)):
                start = int(arrays.offset[j])  # absolute in UMEM
                assert batch.umem[start:start + int(arrays.length[j])].tobytes() == bytes(view)
                walked[d].append((ftype, bytes(view)))
            # datagram by datagram, in order: the flat arrays are the datagrams' frames in a row
            assert [f for w in walked for f in w] == [(t, bytes(v)) for t, v in arrays]
            assert arrays.datagram.tolist() == [d for d, w in enumerate(walked) for _ in w]
            for i, src, dst in zip(range(len(batch)), batch.sources(), batch.destinations()):
                reference = [(f.type, f.payload)
                             for f in datagram.decode_datagram(bytes(batch.payload(i)))]
                out.append((src, dst, walked[i], reference))
    return out


def expected_endpoints(family: int) -> tuple[str, str]:
    return (f"{SRC4}:40000", f"{DST4}:9977") if family == 4 else (f"{SRC6}:40000", f"{DST6}:9977")


def sent_frames(pkt: bytes) -> list[tuple]:
    return [(f.type, f.payload) for f in datagram.decode_datagram(judge.classify_packet(pkt).payload)]


@pytest.mark.usefixtures("each_core")
@pytest.mark.parametrize("seed", [1, 2])
def test_random_datagrams_walk_as_the_reference_decodes_them(attached, seed):
    """1-32 frames of every type, empty and big payloads, IPv4 with and
    without options, IPv6, zero to two VLAN tags, Ethernet padding: sent one
    by one, read in batches of every size."""
    packets = random_packets(seed, 300)
    with XskSocket(attached.dut.ifname, netns=attached.dut.netns, **BIG) as sock:
        traffic.send(attached, [p for _, p in packets])
        got = received(sock, len(packets), batch_size=random.Random(seed).choice([7, 64]))
    for (family, pkt), (src, dst, walked, reference) in zip(packets, got):
        assert walked == reference == sent_frames(pkt)
        assert (src, dst) == expected_endpoints(family)


@pytest.mark.kernel
def test_line_rate_batches_walk_as_the_reference_decodes_them(attached):
    """20,000 datagrams from the line-rate generator, 16 shapes interleaved,
    read in batches of up to 4096: every batch mixes walk lengths."""
    shapes = random_packets(3, 16, budget=1300)
    mix = Mix.weighted([(pkt, 1 + i % 3) for i, (_, pkt) in enumerate(shapes)])
    count = 20_000
    with XskSocket(attached.dut.ifname, netns=attached.dut.netns, **BIG) as sock:
        live_generator(attached.peer.ifname, attached.peer.netns).run(mix, count)
        got = received(sock, count, batch_size=4096)
        assert sock.statistics().lost == 0
    for i, (src, dst, walked, reference) in enumerate(got):
        family, pkt = shapes[mix.schedule[i % len(mix.schedule)]]
        assert walked == reference == sent_frames(pkt), f"datagram {i}"
        assert (src, dst) == expected_endpoints(family)
    assert len({len(w) for _, _, w, _ in got}) > 3  # walks of several lengths were mixed


@pytest.mark.usefixtures("each_core")
def test_the_views_are_umem_and_released_chunks_come_back(attached):
    packets = random_packets(4, 50)
    with XskSocket(attached.dut.ifname, netns=attached.dut.netns, frames=64, rx_size=64) as sock:
        for _ in range(3):  # 150 datagrams through 64 chunks: recycled, not leaked
            traffic.send(attached, [p for _, p in packets])
            got = received(sock, len(packets), batch_size=64)
            assert [w for _, _, w, _ in got] == [sent_frames(p) for _, p in packets]
        traffic.send(attached, [packets[0][1]])
        with sock.recv(timeout=5) as batch:
            views = [view for _, view in batch.frames()]
            assert all(np.shares_memory(np.frombuffer(v, np.uint8), batch.umem)
                       for v in views if len(v))


@pytest.mark.kernel
@pytest.mark.smoke
@pytest.mark.parametrize("family", [4, 6])
def test_a_corrupted_datagram_never_reaches_frames(attached, family):
    """A payload byte changed after the checksum was written, as a faulty
    link delivers it: XDP drops it as bad_checksum, and Batch.frames() sees
    only the intact datagrams, in order."""
    rng = random.Random(family)
    tail = frames.encode(frames.FrameType.TOKEN, "end")  # the byte changed is its last
    payloads = (random_token_payload(rng, 600) + tail for _ in range(100))
    intact = [random_token_packet(rng, p, family) for p in payloads
              if judge.judge_datagram(p).valid][:20]  # not one frame too many
    mixed = [p for pkt in intact for p in (flip_payload_byte(rng, pkt, last=True), pkt)]
    ns, ifname = attached.dut.netns, attached.dut.ifname
    before = counters.flatten(stats.read(ifname, ns)["counters"])
    with XskSocket(ifname, netns=ns, **BIG) as sock:
        traffic.send(attached, mixed)
        got = received(sock, len(intact), batch_size=16)
        with sock.recv(16, timeout=0.3) as extra:
            assert not extra
    assert [w for _, _, w, _ in got] == [sent_frames(p) for p in intact]
    d = counters.delta(counters.flatten(stats.read(ifname, ns)["counters"]), before)
    assert d["malformed.bad_checksum"] == d["malformed_dropped"] == len(intact)
    assert d["redirected"] == len(intact)
