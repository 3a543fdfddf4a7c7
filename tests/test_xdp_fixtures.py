# SPDX-License-Identifier: Apache-2.0
"""Katran-style fixtures: packet in, verdict and counter deltas out, through
BPF_PROG_TEST_RUN on zerolayer's real program. The expectations are written
out by hand, one row per rule of docs/spec.md §1 to §3, and each row is also
held against the reference judge."""

import struct

import pytest

from pyxdp.proto import counters, frames, judge
from pyxdp.proto.frames import MAX_FRAMES
from support.packets import build, ether, ipv4, ipv6, token_frames, udp

pytestmark = [pytest.mark.root, pytest.mark.kernel]

PASS, DROP = judge.XDP_PASS, judge.XDP_DROP
ONE_TOKEN = token_frames(("token", "hello"))
PING = frames.encode(frames.FrameType.PING)


def token(frames_by_type: dict, payload_bytes: int) -> dict:
    delta = {"packets": 1, "token_datagrams": 1, "payload_bytes": payload_bytes,
             "fallback_passed": 1}
    delta.update({f"frames.{t}": n for t, n in frames_by_type.items()})
    return delta


def malformed(reason: str, policy: str = "drop") -> dict:
    return {"packets": 1, f"malformed.{reason}": 1, f"malformed_{policy}ped" if policy == "drop"
            else "malformed_passed": 1}


def last_byte_flipped(packet: bytes) -> bytes:
    """PACKET (no Ethernet padding) with its last payload byte changed after
    the checksum was written."""
    return packet[:-1] + bytes([packet[-1] ^ 0x01])


BIG = frames.encode(frames.FrameType.TOKEN, "x" * 1395)  # 1408-byte UDP: 2 chunks + 383
CORRUPTED_V4 = last_byte_flipped(build(ONE_TOKEN))
CORRUPTED_V6 = last_byte_flipped(build(ONE_TOKEN, family=6))
CORRUPTED_PARTIAL = last_byte_flipped(build(ONE_TOKEN, checksum="partial"))
BIG_CORRUPTED = last_byte_flipped(build(BIG))
CORRUPTED_TRUNCATED = last_byte_flipped(build(frames.HEADER.pack(100, 2) + b"short"))

OTHER = {"packets": 1, "other": 1}
FRAGMENT = {"packets": 1, "fragments": 1}

CASES = [
    # --- token datagrams ---------------------------------------------------------
    ("ipv4 one token", build(ONE_TOKEN), PASS, token({"token": 1}, 5)),
    ("ipv4 request token done",
     build(token_frames(("request", '{"prompt":"hi"}'), ("token", "He"), ("token", "llo"), ("done", ""))),
     PASS, token({"request": 1, "token": 2, "done": 1}, 20)),
    ("ping and pong, empty payloads", build(token_frames(("ping", ""), ("pong", ""))),
     PASS, token({"ping": 1, "pong": 1}, 0)),
    ("ipv6", build(ONE_TOKEN, family=6), PASS, token({"token": 1}, 5)),
    ("802.1Q", build(ONE_TOKEN, vlans=(0x8100,)), PASS, token({"token": 1}, 5)),
    ("802.1ad + 802.1Q", build(ONE_TOKEN, vlans=(0x88A8, 0x8100)), PASS, token({"token": 1}, 5)),
    ("ipv6 in QinQ", build(ONE_TOKEN, family=6, vlans=(0x88A8, 0x8100)), PASS, token({"token": 1}, 5)),
    ("ipv4 options, ihl 6", build(ONE_TOKEN, options=b"\x01" * 4), PASS, token({"token": 1}, 5)),
    ("ipv4 options, ihl 15", build(ONE_TOKEN, options=b"\x01" * 40), PASS, token({"token": 1}, 5)),
    ("ethernet padding after the datagram", build(PING, pad_to=60), PASS, token({"ping": 1}, 0)),
    ("exactly MAX_FRAMES frames", build(PING * MAX_FRAMES), PASS, token({"ping": MAX_FRAMES}, 0)),
    ("DF only is not a fragment", ether(ipv4(udp(ONE_TOKEN), flags_frag=0x4000), 0x0800),
     PASS, token({"token": 1}, 5)),
    # --- malformed ---------------------------------------------------------------
    ("empty payload", build(b""), DROP, malformed("short_header")),
    ("three bytes", build(b"\x00\x00\x00"), DROP, malformed("short_header")),
    ("valid frame then a short tail", build(ONE_TOKEN + b"\x00\x00"), DROP, malformed("short_header")),
    ("length past the end", build(frames.HEADER.pack(9, 2) + b"abc"), DROP, malformed("truncated")),
    ("length 0xffffffff", build(frames.HEADER.pack(0xFFFFFFFF, 2) + b"abc"), DROP, malformed("truncated")),
    ("type 0", build(frames.HEADER.pack(0, 0)), DROP, malformed("unknown_type")),
    ("type 6", build(ONE_TOKEN + frames.HEADER.pack(1, 6) + b"x"), DROP, malformed("unknown_type")),
    ("bad type and bad length: type first", build(frames.HEADER.pack(500, 0xFF)), DROP,
     malformed("unknown_type")),
    ("MAX_FRAMES + 1 frames", build(PING * (MAX_FRAMES + 1)), DROP, malformed("too_many_frames")),
    ("MAX_FRAMES frames and a byte", build(PING * MAX_FRAMES + b"\x00"), DROP,
     malformed("too_many_frames")),
    ("malformed in ipv6 + vlan", build(b"\x00", family=6, vlans=(0x8100,)), DROP,
     malformed("short_header")),
    # --- fragments ---------------------------------------------------------------
    ("ipv4 first fragment (MF)", ether(ipv4(udp(ONE_TOKEN), flags_frag=0x2000), 0x0800), PASS, FRAGMENT),
    ("ipv4 later fragment", ether(ipv4(b"rest of it", flags_frag=185), 0x0800), PASS, FRAGMENT),
    ("ipv4 fragment of another protocol", ether(ipv4(b"x" * 8, proto=6, flags_frag=0x2000), 0x0800),
     PASS, FRAGMENT),
    ("ipv6 fragment header", ether(ipv6(b"\x11\x00\x00\x01\x00\x00\x00\x07" + udp(ONE_TOKEN), nexthdr=44),
                                   0x86DD), PASS, FRAGMENT),
    # --- other traffic, passed untouched ---------------------------------------
    ("another UDP port", build(ONE_TOKEN, dport=53), PASS, OTHER),
    ("TCP to 9977", ether(ipv4(struct.pack("!HHIIHHHH", 40000, 9977, 0, 0, 0x5002, 0, 0, 0), proto=6),
                          0x0800), PASS, OTHER),
    ("ARP", ether(b"\x00\x01\x08\x00\x06\x04\x00\x01" + bytes(20), 0x0806), PASS, OTHER),
    ("three VLAN tags", build(ONE_TOKEN, vlans=(0x88A8, 0x8100, 0x8100)), PASS, OTHER),
    ("ipv6 hop-by-hop first", ether(ipv6(b"\x11\x00" + bytes(6) + udp(ONE_TOKEN), nexthdr=0), 0x86DD),
     PASS, OTHER),
    ("ipv4 ihl 4", ether(ipv4(udp(ONE_TOKEN), ihl=4), 0x0800), PASS, OTHER),
    ("version 6 in an IPv4 ethertype", ether(ipv4(udp(ONE_TOKEN), version=6), 0x0800), PASS, OTHER),
    ("UDP length past the packet", build(ONE_TOKEN, udp_len=200), PASS, OTHER),
    ("UDP length under 8", build(ONE_TOKEN, udp_len=7), PASS, OTHER),
    # --- UDP checksums (§1.8) ------------------------------------------------------
    ("ipv4, checksum zero: none, accepted", build(ONE_TOKEN, checksum="zero"), PASS,
     token({"token": 1}, 5)),
    ("ipv6, checksum zero: invalid", build(ONE_TOKEN, family=6, checksum="zero"), DROP,
     malformed("bad_checksum")),
    ("ipv4, partial sum (a local sender's)", build(ONE_TOKEN, checksum="partial"), PASS,
     token({"token": 1}, 5)),
    ("ipv6, partial sum", build(ONE_TOKEN, family=6, checksum="partial"), PASS,
     token({"token": 1}, 5)),
    ("ipv4, a payload byte changed after the checksum", CORRUPTED_V4, DROP,
     malformed("bad_checksum")),
    ("ipv6, a payload byte changed after the checksum", CORRUPTED_V6, DROP,
     malformed("bad_checksum")),
    # a partial sum covers no payload byte: nothing can tell, as in the kernel
    ("ipv4, partial sum, then a payload byte changed", CORRUPTED_PARTIAL, PASS,
     token({"token": 1}, 5)),
    ("1400 bytes: chunks of 512, every remainder step", build(BIG), PASS,
     token({"token": 1}, len(BIG) - 5)),
    ("1400 bytes, its last byte changed", BIG_CORRUPTED, DROP, malformed("bad_checksum")),
    ("bad checksum, frames malformed too: the walk's reason",
     CORRUPTED_TRUNCATED, DROP, malformed("truncated")),
    # (shorter than an Ethernet header never reaches XDP: test runs refuse it too)
    ("ethernet header only", build(ONE_TOKEN)[:14], PASS, OTHER),
    ("truncated ipv4 header", build(ONE_TOKEN)[:30], PASS, OTHER),
    ("truncated udp header", build(ONE_TOKEN)[:38], PASS, OTHER),
]


def full(delta: dict) -> dict:
    out = counters.zero()
    out.update(delta)
    return out


@pytest.mark.parametrize("name, packet, action, delta", CASES, ids=[c[0] for c in CASES])
def test_fixture(token_program, name, packet, action, delta):
    token_program.configure([frames.DEFAULT_PORT], "drop")
    outcome = token_program.run(packet)
    assert outcome.action_name == {PASS: "XDP_PASS", DROP: "XDP_DROP"}[action]
    assert outcome.counters == full(delta)
    assert outcome.data_out == packet, "XDP must never rewrite a packet"
    # the hand-written row and the reference judge agree
    expected = judge.expected(packet, {frames.DEFAULT_PORT})
    assert (expected.action, expected.counters) == (action, full(delta))


def test_malformed_policy_pass(token_program):
    token_program.configure([frames.DEFAULT_PORT], "pass")
    try:
        outcome = token_program.run(build(b"\x00"))
    finally:
        token_program.configure([frames.DEFAULT_PORT], "drop")
    assert outcome.action_name == "XDP_PASS"
    assert outcome.counters == full(malformed("short_header", "pass"))


def test_a_bad_checksum_follows_policy_pass(token_program):
    token_program.configure([frames.DEFAULT_PORT], "pass")
    try:
        outcome = token_program.run(CORRUPTED_V6)
    finally:
        token_program.configure([frames.DEFAULT_PORT], "drop")
    assert outcome.action_name == "XDP_PASS"
    assert outcome.counters == full(malformed("bad_checksum", "pass"))


def test_port_set_is_runtime_config(token_program):
    packet = build(ONE_TOKEN, dport=10000)
    token_program.configure([9977, 10000], "drop")
    try:
        assert token_program.run(packet).counters == full(token({"token": 1}, 5))
        token_program.configure([9977], "drop")
        assert token_program.run(packet).counters == full(OTHER)
    finally:
        token_program.configure([frames.DEFAULT_PORT], "drop")
