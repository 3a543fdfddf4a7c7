# SPDX-License-Identifier: Apache-2.0
"""The C program against the Python reference judge on 20,000 random and
mutated datagrams, through BPF_PROG_TEST_RUN: the verdict, every counter
delta and the bytes out must agree for every one. Their UDP checksums are
full, partial (the pseudo-header sum a sender leaves to its device), zero,
or broken after the fact (a payload byte flipped), over IPv4 and IPv6. ZEROLAYER_DIFFERENTIAL_CASES
sets a smaller number where a test run is slow (the emulated VM kernels)."""

import os
import random
import struct

import pytest

from pyxdp.proto import frames, judge
from support.packets import CHECKSUMS, build, ether, flip_payload_byte, ipv4, ipv6, udp

pytestmark = [pytest.mark.root, pytest.mark.kernel]


CASES = int(os.environ.get("ZEROLAYER_DIFFERENTIAL_CASES", 20_000))
SEED = 20261130
TOKEN_PORTS = (9977, 10001)


def _valid_frames(rng: random.Random, count: int) -> bytes:
    return b"".join(
        frames.encode(rng.randint(1, 5), rng.randbytes(rng.choice((0, 1, 3, 8, rng.randrange(64)))))
        for _ in range(count)
    )


def _payload(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.35:  # valid, up to and past the frame limit
        return _valid_frames(rng, rng.choice((1, 2, 4, rng.randrange(1, frames.MAX_FRAMES + 3))))
    if kind < 0.75:  # a valid datagram, mutated
        data = bytearray(_valid_frames(rng, rng.randrange(1, 6)))
        for _ in range(rng.randrange(1, 4)):
            op = rng.randrange(5)
            if op == 0 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif op == 1:
                del data[rng.randrange(len(data) + 1):]
            elif op == 2:
                data += rng.randbytes(rng.randrange(1, 9))
            elif op == 3 and len(data) >= 4:  # rewrite the first length field
                struct.pack_into("!I", data, 0, rng.choice((0, 1, 5, 255, 0x10000, 0xFFFFFFFF,
                                                            rng.randrange(2**32))))
            elif op == 4 and len(data) >= 5:  # rewrite the first type byte
                data[4] = rng.choice((0, 6, 7, 0x7F, 0xFF, rng.randrange(256)))
        return bytes(data)
    if kind < 0.85:
        return frames.encode(frames.FrameType.PING) * frames.MAX_FRAMES + rng.randbytes(rng.randrange(0, 6))
    return rng.randbytes(rng.randrange(0, 48))  # noise


def _checksum(rng: random.Random) -> str:
    return rng.choice(CHECKSUMS[:1] * 6 + CHECKSUMS[1:])


def _packet(rng: random.Random) -> bytes:
    payload = _payload(rng)
    shape = rng.random()
    dport = rng.choice(TOKEN_PORTS) if rng.random() < 0.9 else rng.randrange(1, 65536)
    if shape < 0.65:
        return build(
            payload,
            family=rng.choice((4, 4, 6)),
            vlans=rng.choice(((), (), (0x8100,), (0x88A8, 0x8100), (0x8100, 0x8100, 0x8100))),
            dport=dport,
            options=rng.choice((b"", b"", b"\x01" * 4 * rng.randrange(1, 11))),
            pad_to=rng.choice((0, 0, 60)),
            checksum=_checksum(rng),
        )
    if shape < 0.75:  # corrupted on the way: mostly valid frames, a wrong checksum
        payload = _valid_frames(rng, rng.randrange(1, 17))
        packet = build(payload, family=rng.choice((4, 6)), dport=dport,
                       checksum=rng.choice(("full", "full", "partial")))
        return flip_payload_byte(rng, packet)
    if shape < 0.85:  # a UDP length that may lie
        return build(payload, family=rng.choice((4, 6)), dport=dport,
                     udp_len=rng.randrange(0, len(payload) + 20), checksum=_checksum(rng))
    if shape < 0.92:  # fragments
        if rng.random() < 0.5:
            return ether(ipv4(udp(payload, dport), flags_frag=rng.choice((0x2000, 1, 0x3FFF))), 0x0800)
        return ether(ipv6(bytes(8) + udp(payload, dport), nexthdr=44), 0x86DD)
    packet = bytearray(build(payload, dport=dport, checksum=_checksum(rng)))  # random damage anywhere
    for _ in range(rng.randrange(1, 4)):
        packet[rng.randrange(len(packet))] = rng.randrange(256)
    # cut short, but never below an Ethernet header: the kernel does not
    # hand XDP a runt, and test runs refuse one
    return bytes(packet[: rng.randrange(14, len(packet) + 1)] if rng.random() < 0.3 else packet)


def test_c_program_equals_reference_judge(token_program):
    rng = random.Random(SEED)
    mismatches = []
    seen = {"other": 0, "fragment": 0, "token": 0, "malformed": 0, "bad_checksum": 0,
            "partial token": 0, "unchecksummed token": 0}
    for policy in ("drop", "pass"):
        token_program.configure(TOKEN_PORTS, policy)
        for i in range(CASES // 2):
            packet = _packet(rng)
            want = judge.expected(packet, set(TOKEN_PORTS), policy)
            got = token_program.run(packet)
            if (got.action, got.counters, got.data_out) != (want.action, want.counters, packet):
                mismatches.append((policy, i, packet.hex(), got.action, want.action))
            kind = ("fragment" if want.counters["fragments"] else "other" if want.counters["other"]
                    else "token" if want.counters["token_datagrams"] else "malformed")
            seen[kind] += 1
            checksum = judge.classify_packet(packet).checksum
            if want.counters["malformed.bad_checksum"]:
                seen["bad_checksum"] += 1
            elif kind == "token" and checksum != judge.CSUM_FULL:
                seen[f"{'partial' if checksum == judge.CSUM_PARTIAL else 'unchecksummed'} token"] += 1
    token_program.configure([frames.DEFAULT_PORT], "drop")
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"
    # the generator really reaches every class, in numbers
    assert min(seen.values()) > CASES // 100, seen
