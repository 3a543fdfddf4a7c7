# SPDX-License-Identifier: Apache-2.0
"""The reference judge: docs/spec.md §1 to §3 in plain Python.

judge_datagram() decides a UDP payload, udp_checksum() its datagram's
checksum; classify_packet() and expected() model the whole XDP program
(bpf/zl_parse.h, bpf/zl_frames.h, bpf/zl_csum.h, xdp_token.bpf.c):
which packets are ours, the verdict, and which counters move. The
differential test holds the C program to this module on random and hostile
input, so every rule here is stated once and on purpose.
"""

import struct
from dataclasses import dataclass, field

from pyxdp.proto import counters
from pyxdp.proto.ethernet import ETH_P_IP, ETH_P_IPV6, MAX_VLAN_TAGS, VLAN_ETHERTYPES
from pyxdp.proto.frames import FRAME_TYPES, HEADER, HEADER_LEN, MAX_FRAMES

XDP_DROP = 1
XDP_PASS = 2
XDP_REDIRECT = 4

SHORT_HEADER, TRUNCATED, UNKNOWN_TYPE, TOO_MANY_FRAMES, BAD_CHECKSUM = counters.REASONS

# The direct-read window: the furthest packet offset at which the XDP parser
# reads a frame header with direct packet access (the verifier must bound a
# pointer built from a run-time length). The full parser reads later headers
# through bpf_xdp_load_bytes; the direct parser cannot (docs/spec.md §1.7).
# The C gets it as ZL_DIRECT_MAX.
DIRECT_MAX = 0x3FF0


@dataclass(frozen=True)
class Judgement:
    reason: str | None  # None: a token datagram
    frames: tuple[int, ...] = (0,) * len(FRAME_TYPES)  # by type, request..pong
    payload_bytes: int = 0

    @property
    def valid(self) -> bool:
        return self.reason is None


def judge_datagram(payload: bytes, max_frames: int = MAX_FRAMES) -> Judgement:
    """Judge a UDP payload whole: every frame valid, or the first reason met.

    Within one header the type is judged before the length (a stream receiver
    can reject a type as soon as the header arrives). After MAX_FRAMES valid
    frames, any byte left over makes the datagram too_many_frames.
    """
    end = len(payload)
    if end == 0:
        return Judgement(SHORT_HEADER)
    frames = [0] * len(FRAME_TYPES)
    total, off = 0, 0
    for _ in range(max_frames):
        remaining = end - off
        if remaining < HEADER_LEN:
            return Judgement(SHORT_HEADER)
        length, ftype = HEADER.unpack_from(payload, off)
        if not 1 <= ftype <= len(FRAME_TYPES):
            return Judgement(UNKNOWN_TYPE)
        if length > remaining - HEADER_LEN:
            return Judgement(TRUNCATED)
        frames[ftype - 1] += 1
        total += length
        off += HEADER_LEN + length
        if off == end:
            return Judgement(None, tuple(frames), total)
    return Judgement(TOO_MANY_FRAMES)


def beyond_window(payload: bytes, payload_off: int, max_frames: int = MAX_FRAMES) -> bool:
    """Whether the direct parser leaves PAYLOAD (starting PAYLOAD_OFF bytes
    into its packet) unjudged: its walk comes to a header it would have to
    read more than DIRECT_MAX bytes into the packet, with frames left in
    the budget and that header's 5 bytes inside the datagram. Everything
    else it judges as judge_datagram() does."""
    end, off = len(payload), 0
    for i in range(max_frames):
        if end - off < HEADER_LEN:
            return False
        length, ftype = HEADER.unpack_from(payload, off)
        if not 1 <= ftype <= len(FRAME_TYPES):
            return False
        off += HEADER_LEN + length
        if off >= end:
            return False
        if payload_off + off > DIRECT_MAX:
            return i + 1 < max_frames and end - off >= HEADER_LEN
    return False


# --- the packet around the datagram ---------------------------------------------

# The C parser gets these as ZL_IPPROTO_*, ZL_IP_MF and ZL_IP_OFFSET
# (pyxdp.xdp.compiler.shared_defines).
IPPROTO_UDP, IPPROTO_FRAGMENT = 17, 44  # IPv6's fragment extension header
IP_MF, IP_OFFSET = 0x2000, 0x1FFF  # in IPv4's frag_off

OTHER, FRAGMENT, UDP = "other", "fragment", "udp"


# What a UDP checksum field holds (docs/spec.md §1.8).
CSUM_NONE, CSUM_FULL, CSUM_PARTIAL, CSUM_BAD = "none", "full", "partial", "bad"
# A datagram must end this far into the packet at most to be checked: the
# verifier's reach (64 KiB) less the last reads' (bpf/zl_csum.h).
CSUM_REACH = 0xFFFF - 3


def ones_sum(data: bytes) -> int:
    """RFC 1071: the one's-complement sum of DATA's 16-bit big-endian words
    (an odd last byte padded with zero), folded to 16 bits."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def udp_checksum(pkt: bytes, l3: int, l4: int, version: int) -> str:
    """How the datagram at L4 (its IP header at L3) is checksummed: none
    (IPv4's zero), full (correct), partial (the field holds only the folded
    pseudo-header sum: a locally sent datagram whose checksum a device was
    to finish), or bad."""
    (ulen, check) = struct.unpack_from("!HH", pkt, l4 + 4)
    if check == 0:
        return CSUM_NONE if version == 4 else CSUM_BAD
    if l4 + ulen > CSUM_REACH:
        return CSUM_BAD
    addresses = pkt[l3 + 12:l3 + 20] if version == 4 else pkt[l3 + 8:l3 + 40]
    pseudo = addresses + struct.pack("!HH", IPPROTO_UDP, ulen)
    if ones_sum(pseudo + pkt[l4:l4 + ulen]) == 0xFFFF:
        return CSUM_FULL
    return CSUM_PARTIAL if check == ones_sum(pseudo) else CSUM_BAD


@dataclass(frozen=True)
class Classified:
    kind: str  # OTHER, FRAGMENT or UDP
    dport: int = 0
    payload: bytes = b""
    payload_off: int = 0  # where PAYLOAD starts in the packet
    checksum: str = CSUM_NONE  # for UDP


def classify_packet(pkt: bytes) -> Classified:
    """Ethernet, up to two VLAN tags, IPv4 (options) or IPv6, then UDP."""
    if len(pkt) < 14:
        return Classified(OTHER)
    (proto,) = struct.unpack_from("!H", pkt, 12)
    off = 14
    for _ in range(MAX_VLAN_TAGS):
        if proto not in VLAN_ETHERTYPES:
            break
        if len(pkt) < off + 4:
            return Classified(OTHER)
        (proto,) = struct.unpack_from("!H", pkt, off + 2)
        off += 4
    if proto == ETH_P_IP:
        if len(pkt) < off + 20:
            return Classified(OTHER)
        ver_ihl = pkt[off]
        if ver_ihl >> 4 != 4 or ver_ihl & 0xF < 5:
            return Classified(OTHER)
        (frag,) = struct.unpack_from("!H", pkt, off + 6)
        if frag & (IP_MF | IP_OFFSET):
            return Classified(FRAGMENT)
        if pkt[off + 9] != IPPROTO_UDP:
            return Classified(OTHER)
        l4 = off + (ver_ihl & 0xF) * 4
        version = 4
    elif proto == ETH_P_IPV6:
        if len(pkt) < off + 40 or pkt[off] >> 4 != 6:
            return Classified(OTHER)
        if pkt[off + 6] == IPPROTO_FRAGMENT:
            return Classified(FRAGMENT)
        if pkt[off + 6] != IPPROTO_UDP:
            return Classified(OTHER)
        l4 = off + 40
        version = 6
    else:
        return Classified(OTHER)
    if len(pkt) < l4 + 8:
        return Classified(OTHER)
    _, dport, ulen = struct.unpack_from("!HHH", pkt, l4)
    # A UDP length the packet does not back up is left to the kernel to drop.
    if ulen < 8 or l4 + ulen > len(pkt):
        return Classified(OTHER)
    return Classified(UDP, dport, pkt[l4 + 8:l4 + ulen], l4 + 8,
                      udp_checksum(pkt, off, l4, version))


@dataclass(frozen=True)
class Expected:
    action: int
    counters: dict[str, int] = field(default_factory=counters.zero)
    judgement: Judgement | None = None


def expected(
    pkt: bytes,
    ports,
    on_malformed: str = "drop",
    socket_registered: bool = False,
    max_frames: int = MAX_FRAMES,
    direct: bool = False,
    first_buffer: int | None = None,
    socket_takes_buffers: bool = False,
) -> Expected:
    """The verdict and counter deltas the XDP program must produce for PKT:
    the full parser's, or with DIRECT the direct parser's (§1.7).
    FIRST_BUFFER: how many of PKT's bytes the driver put in its first
    buffer (None: all); a datagram that goes on past it reaches the
    queue's socket only if that SOCKET_TAKES_BUFFERS (§1.9)."""
    delta = counters.zero()
    delta["packets"] = 1
    seen = classify_packet(pkt)
    if seen.kind == FRAGMENT:
        delta["fragments"] = 1
        return Expected(XDP_PASS, delta)
    if seen.kind != UDP or seen.dport not in ports:
        delta["other"] = 1
        return Expected(XDP_PASS, delta)
    if direct and beyond_window(seen.payload, seen.payload_off, max_frames):
        delta["beyond_window"] = 1
        return Expected(XDP_PASS, delta)
    verdict = judge_datagram(seen.payload, max_frames)
    # Only a datagram whose frames are all valid has its checksum checked.
    if verdict.valid and seen.checksum == CSUM_BAD:
        verdict = Judgement(BAD_CHECKSUM)
    if not verdict.valid:
        delta[f"malformed.{verdict.reason}"] = 1
        if on_malformed == "pass":
            delta["malformed_passed"] = 1
            return Expected(XDP_PASS, delta, verdict)
        delta["malformed_dropped"] = 1
        return Expected(XDP_DROP, delta, verdict)
    delta["token_datagrams"] = 1
    for label, n in zip(counters.FRAME_LABELS, verdict.frames):
        delta[f"frames.{label}"] = n
    delta["payload_bytes"] = verdict.payload_bytes
    if socket_registered:
        datagram_end = seen.payload_off + len(seen.payload)
        if first_buffer is not None and datagram_end > first_buffer and not socket_takes_buffers:
            delta["multi_buffer_passed"] = 1
            return Expected(XDP_PASS, delta, verdict)
        delta["redirected"] = 1
        return Expected(XDP_REDIRECT, delta, verdict)
    delta["fallback_passed"] = 1
    return Expected(XDP_PASS, delta, verdict)
