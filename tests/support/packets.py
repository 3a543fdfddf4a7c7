# SPDX-License-Identifier: Apache-2.0
"""Packet builders for the XDP tests.

build() assembles Ethernet / VLAN / IPv4 or IPv6 / UDP around a payload with
struct, fast enough for tens of thousands of differential cases, and with
knobs for the hostile variants (IP options, fragments, lying UDP lengths).
"""

import random
import struct

from pyxdp.proto import frames, judge

DUT_MAC = bytes.fromhex("027a00000001")
PEER_MAC = bytes.fromhex("027a00000002")
SRC4, DST4 = bytes([198, 18, 0, 2]), bytes([198, 18, 0, 1])
SRC6 = bytes.fromhex("fd0007a1000000000000000000000002")
DST6 = bytes.fromhex("fd0007a1000000000000000000000001")


def udp(payload: bytes, dport: int = frames.DEFAULT_PORT, sport: int = 40000,
        length: int | None = None) -> bytes:
    ulen = 8 + len(payload) if length is None else length
    return struct.pack("!HHHH", sport, dport, ulen & 0xFFFF, 0) + payload


CHECKSUMS = ("full", "partial", "zero")


def with_checksum(l4: bytes, src: bytes, dst: bytes, how: str) -> bytes:
    """L4, a UDP datagram from SRC to DST, with its checksum field set HOW:
    full (correct; 0 sent as 0xFFFF), partial (the folded pseudo-header sum
    alone, as a sender that leaves the rest to its device writes it), zero."""
    if len(l4) < 8 or how == "zero":
        return l4
    (ulen,) = struct.unpack_from("!H", l4, 4)
    pseudo = src + dst + struct.pack("!HH", 17, ulen)
    if how == "partial":
        check = judge.ones_sum(pseudo)
    else:
        check = ~judge.ones_sum(pseudo + l4[:6] + b"\x00\x00" + l4[8:ulen]) & 0xFFFF or 0xFFFF
    return l4[:6] + struct.pack("!H", check) + l4[8:]


def ipv4(l4: bytes, *, proto: int = 17, options: bytes = b"", flags_frag: int = 0,
         version: int = 4, ihl: int | None = None, checksum: str = "zero") -> bytes:
    """CHECKSUM: how a UDP L4 (PROTO 17, not a fragment) is checksummed."""
    assert len(options) % 4 == 0
    if proto == 17 and not flags_frag:
        l4 = with_checksum(l4, SRC4, DST4, checksum)
    ihl = 5 + len(options) // 4 if ihl is None else ihl
    total = 20 + len(options) + len(l4)
    hdr = struct.pack("!BBHHHBBH4s4s", (version << 4) | ihl, 0, total & 0xFFFF, 1,
                      flags_frag, 64, proto, 0, SRC4, DST4)
    return hdr + options + l4


def ipv6(l4: bytes, *, nexthdr: int = 17, version: int = 6, checksum: str = "full") -> bytes:
    """A UDP L4 (NEXTHDR 17) gets a CHECKSUM: full by default, IPv6 requires one."""
    if nexthdr == 17:
        l4 = with_checksum(l4, SRC6, DST6, checksum)
    return struct.pack("!IHBB16s16s", version << 28, len(l4), nexthdr, 64, SRC6, DST6) + l4


def ether(l3: bytes, ethertype: int, vlans: tuple[int, ...] = ()) -> bytes:
    """VLANS are the tag ethertypes, outermost first (0x88A8, 0x8100)."""
    out = DUT_MAC + PEER_MAC
    for i, tpid in enumerate(vlans):
        out += struct.pack("!HH", tpid, 100 + i)
    return out + struct.pack("!H", ethertype) + l3


def build(payload: bytes, *, family: int = 4, vlans: tuple[int, ...] = (),
          dport: int = frames.DEFAULT_PORT, options: bytes = b"", udp_len: int | None = None,
          pad_to: int = 0, checksum: str = "full") -> bytes:
    """A token-port UDP datagram carrying PAYLOAD, its checksum set as
    with_checksum() says, padded with zeros to PAD_TO bytes as Ethernet
    padding would be."""
    l4 = udp(payload, dport, length=udp_len)
    if family == 4:
        pkt = ether(ipv4(l4, options=options, checksum=checksum), 0x0800, vlans)
    else:
        pkt = ether(ipv6(l4, checksum=checksum), 0x86DD, vlans)
    return pkt + bytes(max(0, pad_to - len(pkt)))


def flip_payload_byte(rng: random.Random, pkt: bytes, last: bool = False) -> bytes:
    """PKT, a UDP datagram with a payload, with one payload byte (the LAST
    one, or any) changed after its checksum was written: corrupted on the
    way."""
    off = 14
    while struct.unpack_from("!H", pkt, off - 2)[0] in (0x8100, 0x88A8):
        off += 4
    (ethertype,) = struct.unpack_from("!H", pkt, off - 2)
    l4 = off + (pkt[off] & 0xF) * 4 if ethertype == 0x0800 else off + 40
    (ulen,) = struct.unpack_from("!H", pkt, l4 + 4)
    damaged = bytearray(pkt)
    damaged[l4 + (ulen - 1 if last else 8 + rng.randrange(ulen - 8))] ^= rng.randrange(1, 256)
    return bytes(damaged)


def token_frames(*items) -> bytes:
    """token_frames(("token", "hi"), ("done", "")) -> wire bytes."""
    return b"".join(frames.encode(frames.FrameType[name.upper()], body) for name, body in items)


VLAN_STACKS = [(), (0x8100,), (0x88A8, 0x8100), (0x8100, 0x8100)]


def random_token_payload(rng: random.Random, budget: int = 1400) -> bytes:
    """A valid token datagram of at most BUDGET bytes: 1-32 frames of every
    type, empty to big payloads."""
    count = rng.choice([1, 1, 2, 3, rng.randint(1, frames.MAX_FRAMES), frames.MAX_FRAMES])
    out = b""
    for _ in range(count):
        room = max(0, budget - len(out) - frames.HEADER_LEN * count)
        size = rng.choice([0, 0, 1, 4, 16, rng.randint(0, 200), rng.randint(0, room)])
        body = bytes(rng.getrandbits(8) for _ in range(min(size, room)))
        out += frames.encode(rng.choice(list(frames.FrameType)), body)
    return out


def random_token_packet(rng: random.Random, payload: bytes, family: int) -> bytes:
    """PAYLOAD in IPv4 (sometimes with options) or IPv6, under zero to two
    VLAN tags, sometimes padded as a short Ethernet frame is."""
    options = b"\x01" * 4 * rng.choice([0, 0, 1, 10])  # IPv4 options, up to IHL 15
    return build(payload, family=family, vlans=rng.choice(VLAN_STACKS),
                 options=options if family == 4 else b"", pad_to=rng.choice([0, 60]))
