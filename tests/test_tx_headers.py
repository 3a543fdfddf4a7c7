# SPDX-License-Identifier: Apache-2.0
"""What AF_XDP transmit writes, without a kernel: the headers and checksums
of pyxdp.xsk.headers against a byte-by-byte reference (RFC 1071, 768,
791, 8200) and against scapy's parser, on random inputs; the packing of
frames into datagrams; emit's numbered payloads."""

import ipaddress
import random
import struct

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from pyxdp.proto import judge
from pyxdp.proto.frames import HEADER, MAX_FRAMES, FrameType
from pyxdp.xsk import emit, headers
from pyxdp.xsk.sender import pack

CHUNK = 2048


def reference_udp_checksum(src: str, dst: str, udp_segment: bytes) -> int:
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if s.version == 4:
        pseudo = s.packed + d.packed + struct.pack("!BBH", 0, 17, len(udp_segment))
    else:
        pseudo = s.packed + d.packed + struct.pack("!I3xB", len(udp_segment), 17)
    check = ~judge.ones_sum(pseudo + udp_segment) & 0xFFFF
    return check or 0xFFFF


def random_endpoints(rng: random.Random, version: int) -> tuple[str, str]:
    bits = 32 if version == 4 else 128
    make = ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address
    return str(make(rng.getrandbits(bits))), str(make(rng.getrandbits(bits)))


def random_payloads(rng: random.Random, n: int, longest: int) -> list[bytes]:
    sizes = [rng.choice((0, 1, 2, 3, longest, rng.randrange(longest + 1))) for _ in range(n)]
    return [rng.randbytes(size) for size in sizes]


def written(payloads: list[bytes], t: headers.Template, chunk_offset: int = 0) -> list[bytes]:
    """PAYLOADS sent as the sender writes them (on the core each_core
    chose): each in its own chunk of a UMEM, the frames read back."""
    umem = np.zeros(CHUNK * len(payloads), np.uint8)
    addr = np.arange(len(payloads), dtype=np.uint64) * CHUNK + np.uint64(chunk_offset)
    rows, lengths = headers.payload_matrix(payloads)
    frame_len = headers.send_batch(umem, addr, rows, lengths, t)
    assert frame_len.dtype == np.uint32
    return [umem[int(a):int(a) + int(n)].tobytes() for a, n in zip(addr, frame_len)]


@pytest.mark.usefixtures("each_core")
@pytest.mark.parametrize("version", [4, 6])
def test_checksums_match_the_reference_on_random_datagrams(version):
    rng = random.Random(version)
    for _ in range(40):
        src, dst = random_endpoints(rng, version)
        sport, dport = rng.randrange(1, 65536), rng.randrange(1, 65536)
        t = headers.template("02:00:00:00:00:01", "02:00:00:00:00:02", src, dst, sport, dport)
        payloads = random_payloads(rng, rng.randrange(1, 40), t.max_payload(1500))
        for payload, frame in zip(payloads, written(payloads, t)):
            udp = frame[t.udp_offset:]
            assert udp[8:] == payload
            assert struct.unpack_from("!HHH", udp) == (sport, dport, 8 + len(payload))
            segment = udp[:6] + b"\0\0" + udp[8:]
            assert struct.unpack_from("!H", udp, 6)[0] == reference_udp_checksum(src, dst, segment)
            if version == 4:
                ip = frame[14:34]
                assert judge.ones_sum(ip) == 0xFFFF  # a valid header sums to all ones
                assert struct.unpack_from("!H", ip, 2)[0] == 20 + len(udp)
            else:
                assert struct.unpack_from("!H", frame, 14 + 4)[0] == len(udp)


@pytest.mark.usefixtures("each_core")
@pytest.mark.parametrize("version", [4, 6])
def test_scapy_reads_the_frames_as_sent(version):
    """Every field as scapy parses it, and scapy's own checksums agree."""
    rng = random.Random(10 + version)
    src, dst = random_endpoints(rng, version)
    t = headers.template("02:7a:00:00:00:02", "02:7a:00:00:00:01", src, dst, 40000, 9977)
    payloads = random_payloads(rng, 50, t.max_payload(1500))
    for payload, frame in zip(payloads, written(payloads, t, chunk_offset=256)):
        pkt = Ether(frame)
        l3 = pkt[IP] if version == 4 else pkt[IPv6]
        assert (pkt.src, pkt.dst, l3.src, l3.dst) == ("02:7a:00:00:00:02", "02:7a:00:00:00:01",
                                                      str(ipaddress.ip_address(src)),
                                                      str(ipaddress.ip_address(dst)))
        assert (pkt[UDP].sport, pkt[UDP].dport, bytes(pkt[UDP].payload)) == (40000, 9977, payload)
        again = pkt.copy()
        del again[UDP].chksum
        if version == 4:
            del again[IP].chksum
            assert l3.ttl == 64 and l3.flags == "DF"
        assert bytes(Ether(bytes(again))) == frame
        seen = judge.classify_packet(frame)
        assert (seen.kind, seen.dport, seen.payload, seen.checksum) == (
            judge.UDP, 9977, payload, judge.CSUM_FULL)


@pytest.mark.usefixtures("each_core")
def test_a_checksum_that_sums_to_zero_is_sent_as_all_ones():
    """RFC 768: a computed 0 is sent as 0xFFFF (0 means none over IPv4).
    A two-byte payload adds its value to the sum: pick the one that makes
    the checksum 0, and look at what goes out."""
    src, dst = "198.18.0.2", "198.18.0.1"
    t = headers.template("02:00:00:00:00:01", "02:00:00:00:00:02", src, dst, 40000, 9977)
    pseudo = ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed + \
        struct.pack("!BBH", 0, 17, 10)
    without = judge.ones_sum(pseudo + struct.pack("!HHHH", 40000, 9977, 10, 0))
    payload = (0xFFFF - without).to_bytes(2, "big")
    assert ~judge.ones_sum(pseudo + struct.pack("!HHHH", 40000, 9977, 10, 0) + payload) & 0xFFFF == 0
    frame = written([payload], t)[0]
    assert frame[t.udp_offset + 6:t.udp_offset + 8] == b"\xff\xff"


def test_rows_past_the_end_of_umem_are_read_cut():
    umem = np.arange(64, dtype=np.uint8)
    rows = headers.read_rows(umem, np.array([0, 60]), np.array([10, 4]))
    assert rows[0].tolist() == list(range(10))
    assert rows[1].tolist() == [60, 61, 62, 63] + [0] * 6


@pytest.mark.parametrize("size,max_payload,expect", [
    (21, 1472, [32, 32, 32, 4]),  # the frame budget ends each datagram
    (205, 1472, [7] * 7 + [1]),  # the MTU does: 7 x 205 = 1435 bytes
    (1472, 1472, [1] * 100),  # one full datagram each
])
def test_frames_pack_greedily_under_the_mtu_and_the_frame_budget(size, max_payload, expect):
    n = sum(expect)
    ranges = pack(np.full(n, size), max_payload)
    assert [b - a for a, b in ranges] == expect
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a2 == b1 for (_, b1), (a2, _) in zip(ranges, ranges[1:]))


def test_packing_mixed_sizes_never_breaks_a_limit():
    rng = random.Random(3)
    sizes = np.array([rng.choice((5, 6, 40, 300, 1000)) for _ in range(2000)])
    ranges = pack(sizes, 1472)
    for a, b in ranges:
        assert 1 <= b - a <= MAX_FRAMES and sizes[a:b].sum() <= 1472
        # greedy: the next frame would not have fitted
        if b < len(sizes) and b - a < MAX_FRAMES:
            assert sizes[a:b + 1].sum() > 1472


@pytest.mark.parametrize("k,b", [(1, 16), (4, 3), (32, 0), (2, 25)])
def test_emit_numbers_every_token(k, b):
    rows = emit.token_rows(7, 5, k, b)
    for d, row in enumerate(rows):
        raw = row.tobytes()
        assert judge.judge_datagram(raw).valid
        for j in range(k):
            token = (7 + d) * k + j
            frame = raw[j * (5 + b):(j + 1) * (5 + b)]
            text = (f"{token:010d}"[-b:] if b else "") + (" tok" * b)[:max(0, b - 10)]
            assert frame == HEADER.pack(b, FrameType.TOKEN) + text.encode()
