# SPDX-License-Identifier: Apache-2.0
"""The flow table of the real XDP program under BPF_PROG_TEST_RUN: which
datagrams make a flow, its key, its counts, the gap samples a datagram adds
(not their size: that is timing, see test_flows_cadence.py), the off switch,
and LRU eviction."""

import ipaddress
import struct

import pytest

from pyxdp.kernel import bpfsys
from pyxdp.proto import frames, judge
from pyxdp.proto.frames import FrameType
from pyxdp.xdp import flows
from pyxdp.xdp.maps import FLOW, FLOW_KEY, GAP_BUCKETS
from support.packets import SRC6, ether, ipv4, ipv6, token_frames, udp

pytestmark = [pytest.mark.root, pytest.mark.kernel, pytest.mark.capability("flows")]


T = frames.encode(FrameType.TOKEN, "tok")
REQUEST = frames.encode(FrameType.REQUEST, '{"prompt":"hi"}')
DONE = frames.encode(FrameType.DONE, "")
PING = frames.encode(FrameType.PING)


def v4(payload: bytes, sport: int = 40000, dport: int = frames.DEFAULT_PORT, vlans=(),
       options: bytes = b"") -> bytes:
    return ether(ipv4(udp(payload, dport, sport), options=options), 0x0800, vlans)


def v6(payload: bytes, sport: int = 40000, vlans=()) -> bytes:
    return ether(ipv6(udp(payload, sport=sport)), 0x86DD, vlans)


def clear(maps) -> None:
    m = maps["flows"]
    for key, _ in bpfsys.map_lookup_batch(m.fd, FLOW_KEY.size, FLOW.size, m.info.max_entries):
        bpfsys.map_delete(m.fd, key)


@pytest.fixture
def prog(token_program):
    """The session's program with an empty flow table and tracking on, put
    back to the default (off) afterwards."""
    maps = token_program.maps
    clear(maps)
    maps.set_flows_enabled(True)
    yield token_program
    maps.set_flows_enabled(False)
    clear(maps)


def table(prog) -> dict:
    return {(f.src, f.dport, f.ip_version): f for f in flows.read(prog.maps)}


def samples(flow) -> int:
    return sum(flow.gaps)


def test_flow_key_ipv4_ipv6_vlan_and_options(prog):
    prog.run(v4(T, sport=40001))
    prog.run(v4(T, sport=40002, vlans=(0x88A8, 0x8100)))
    prog.run(v4(T, sport=40003, options=b"\x01" * 40))
    prog.run(v6(T, sport=40004, vlans=(0x8100,)))
    prog.run(v4(T, sport=40001, dport=9978))  # not a token port: no flow
    got = table(prog)
    assert set(got) == {
        ("198.18.0.2:40001", 9977, 4),
        ("198.18.0.2:40002", 9977, 4),
        ("198.18.0.2:40003", 9977, 4),
        (f"[{ipaddress.IPv6Address(SRC6)}]:40004", 9977, 6),
    }


def test_a_token_port_added_at_run_time_is_its_own_flow(prog):
    try:
        prog.configure([frames.DEFAULT_PORT, 9978], "drop")
        prog.run(v4(T, sport=40001))
        prog.run(v4(T, sport=40001, dport=9978))
        assert {(f.sport, f.dport) for f in flows.read(prog.maps)} == {(40001, 9977), (40001, 9978)}
    finally:
        prog.configure([frames.DEFAULT_PORT], "drop")


@pytest.mark.smoke
def test_flow_counts_match_the_judge(prog):
    datagrams = [REQUEST, T, T * 3, PING, token_frames(("token", "abc"), ("done", '{"n":4}'))]
    for d in datagrams:
        assert prog.run(v4(d)).action == judge.XDP_PASS
    (flow,) = flows.read(prog.maps)
    verdicts = [judge.judge_datagram(d) for d in datagrams]
    assert flow.datagrams == len(datagrams)
    assert flow.payload_bytes == sum(v.payload_bytes for v in verdicts)
    assert tuple(flow.frames.values()) == tuple(map(sum, zip(*(v.frames for v in verdicts))))
    assert 0 < flow.first_ns < flow.last_ns


def test_only_token_datagrams_make_flows(prog):
    prog.run(v4(T + b"\x00\x00", sport=41000))             # malformed: short_header
    prog.run(v4(frames.HEADER.pack(1, 0x7F) + b"?", sport=41001))  # unknown_type
    prog.run(v4(PING * (frames.MAX_FRAMES + 1), sport=41002))      # too_many_frames
    prog.run(ether(ipv4(udp(T), flags_frag=0x2000), 0x0800))       # a fragment
    assert flows.read(prog.maps) == []


def test_gap_samples_one_per_token_with_a_clock(prog):
    """REQUEST resets before its datagram's tokens, DONE after; tokens that
    share a datagram have gap 0; PING leaves the clock alone."""
    hist_before, _ = flows.read_gap_hist(prog.maps)
    steps = [
        (REQUEST, 0, 0),          # no token
        (T, 0, 0),                # first token of the stream: no clock yet
        (T, 1, 0),                # one gap (a few us: two syscalls apart)
        (T * 3, 3, 2),            # one gap, two zeros
        (PING, 0, 0),             # leaves the clock alone ...
        (T, 1, 0),                # ... so this token has a gap
        (T + DONE, 1, 0),         # DONE after the token: it still has its gap
        (T, 0, 0),                # the clock was reset: no sample
        (REQUEST + T * 2, 1, 1),  # REQUEST resets first: only the zero
        (DONE, 0, 0),
    ]
    total = zeros = 0
    for payload, new_samples, new_zeros in steps:
        prog.run(v4(payload))
        total += new_samples
        zeros += new_zeros
        (flow,) = flows.read(prog.maps)
        assert samples(flow) == total, payload
        # Two test runs are microseconds apart, never under 1 us: bucket 0
        # holds exactly the tokens that shared a datagram.
        assert flow.gaps[0] == zeros, payload
    hist_after, _ = flows.read_gap_hist(prog.maps)
    assert [a - b for a, b in zip(hist_after, hist_before)] == list(flow.gaps)


def test_switched_off_nothing_is_tracked_and_counters_still_count(prog):
    prog.maps.set_flows_enabled(False)
    assert not prog.maps.flows_enabled()
    hist_before, _ = flows.read_gap_hist(prog.maps)
    out = prog.run(v4(T * 2))
    assert out.counters["frames.token"] == 2
    assert flows.read(prog.maps) == []
    assert flows.read_gap_hist(prog.maps)[0] == hist_before
    prog.maps.set_flows_enabled(True)
    prog.run(v4(T * 2))
    assert len(flows.read(prog.maps)) == 1


def test_the_switch_keeps_the_malformed_policy(prog):
    try:
        prog.configure([frames.DEFAULT_PORT], "pass")
        prog.maps.set_flows_enabled(False)
        assert prog.maps.on_malformed() == "pass"
        prog.maps.set_on_malformed("drop")
        assert not prog.maps.flows_enabled()
    finally:
        prog.configure([frames.DEFAULT_PORT], "drop")


def test_a_full_table_evicts_the_least_recently_used(prog):
    capacity = prog.maps["flows"].info.max_entries
    template = bytearray(v4(T, sport=1))
    sport_at = 14 + 20  # Ethernet, IPv4 without options, then the UDP source port
    extra = 512
    for sport in range(1, capacity + extra + 1):
        struct.pack_into("!H", template, sport_at, sport)
        bpfsys.prog_test_run(prog.prog_fd, bytes(template))
    seen = {f.sport for f in flows.read(prog.maps)}
    assert capacity - extra <= len(seen) <= capacity
    assert capacity + extra in seen  # the newest stays
    assert 1 not in seen             # the oldest went


def test_gap_bucket_edges():
    """The Python reference of zl_gap_bucket (the cadence test holds the C
    side to it with real gaps)."""
    assert flows.gap_bucket(0) == flows.gap_bucket(999) == 0
    assert flows.gap_bucket(1000) == flows.gap_bucket(1999) == 1
    assert flows.gap_bucket(2000) == 2
    assert flows.gap_bucket(23_000_000) == 15          # [16.4, 32.8) ms
    assert flows.gap_bucket(90_000_000) == 17          # [65.5, 131) ms
    assert flows.gap_bucket(1_048_575_999) == 20
    assert flows.gap_bucket(1_048_576_000) == GAP_BUCKETS - 1
    assert flows.gap_bucket(10**12) == GAP_BUCKETS - 1
    assert flows.BUCKET_LE_US[15] == 32768 and flows.BUCKET_LE_US[-1] is None
