# SPDX-License-Identifier: Apache-2.0
"""Token traffic as scapy packets, and sending it from a lab's peer.

A conversation is what an inference gateway sees per stream: a REQUEST, the
answer as TOKEN frames (a few per datagram), then DONE. mixed_traffic()
interleaves several conversations and adds malformed datagrams (one per
reason) and ordinary traffic, so one replay exercises every counter.
"""

import json
import random
import time
from dataclasses import dataclass

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from pyxdp.lab.veth_lab import Lab
from pyxdp.proto import counters, frames, judge
from pyxdp.proto.frames import FrameType

ANSWERS = [
    "XDP sees the packet before the kernel allocates anything for it.",
    "AF_XDP hands frames to userspace through a shared ring.",
    "The stream parser cuts a TCP byte stream into whole frames.",
    "Counters are per CPU, so the fast path never takes a lock.",
    "A verifier proves every packet access stays in bounds.",
    "Zero-copy only happens where the driver supports it.",
]


@dataclass(frozen=True)
class Conversation:
    sport: int
    prompt: str
    answer: str
    ipv6: bool = False

    def tokens(self) -> list[str]:
        words = self.answer.split(" ")
        return [w if i == 0 else " " + w for i, w in enumerate(words)]

    def datagrams(self, per_datagram: int = 3) -> list[bytes]:
        """UDP payloads: REQUEST, TOKENs a few per datagram, DONE."""
        request = json.dumps({"model": "demo", "prompt": self.prompt})
        toks = self.tokens()
        out = [frames.encode(FrameType.REQUEST, request)]
        for i in range(0, len(toks), per_datagram):
            out.append(b"".join(frames.encode(FrameType.TOKEN, t) for t in toks[i:i + per_datagram]))
        usage = json.dumps({"completion_tokens": len(toks)})
        out.append(frames.encode(FrameType.DONE, usage))
        return out


def udp_packet(lab: Lab, payload: bytes, *, sport: int, dport: int = frames.DEFAULT_PORT,
               ipv6: bool = False):
    """A UDP datagram from LAB's peer to its dut (anything with .peer and
    .dut endpoints will do, as pyxdp.lab.replay.Route)."""
    l2 = Ether(src=lab.peer.mac, dst=lab.dut.mac)
    l3 = IPv6(src=lab.peer.ipv6, dst=lab.dut.ipv6) if ipv6 else IP(src=lab.peer.ipv4, dst=lab.dut.ipv4)
    return l2 / l3 / UDP(sport=sport, dport=dport) / Raw(payload)


def conversations(count: int, seed: int = 7) -> list[Conversation]:
    rng = random.Random(seed)
    return [
        Conversation(
            sport=40000 + i,
            prompt=f"question {i}",
            answer=ANSWERS[i % len(ANSWERS)],
            ipv6=(i % 3 == 2),
        )
        for i in rng.sample(range(count), count)
    ]


def malformed_payloads() -> dict[str, bytes]:
    """One datagram per malformed reason."""
    return {
        "short_header": frames.encode(FrameType.TOKEN, "ok") + b"\x00\x00",
        "truncated": frames.HEADER.pack(100, FrameType.TOKEN) + b"only a few bytes",
        "unknown_type": frames.encode(FrameType.TOKEN, "ok") + frames.HEADER.pack(1, 0x7F) + b"?",
        "too_many_frames": frames.encode(FrameType.PING) * (frames.MAX_FRAMES + 1),
    }


def corrupted(packet) -> Ether:
    """PACKET as a faulty link delivers it: its last byte changed after the
    UDP checksum was written (bad_checksum, when that byte is a frame's)."""
    raw = bytearray(bytes(packet))
    raw[-1] ^= 0x20
    return Ether(bytes(raw))


def malformed_packets(route, *, sport: int, dport: int = frames.DEFAULT_PORT) -> list:
    """One malformed datagram from ROUTE's peer per reason, in the order of
    counters.REASONS: the payloads of malformed_payloads(), then a valid one
    with a wrong checksum. Source ports from SPORT up, one each."""
    out = [udp_packet(route, p, sport=sport + i, dport=dport)
           for i, p in enumerate(malformed_payloads().values())]
    intact = udp_packet(route, frames.encode(FrameType.TOKEN, "ok"), sport=sport + len(out),
                        dport=dport)
    return out + [corrupted(intact)]


def non_token_packets(lab: Lab) -> list:
    """One malformed datagram per reason, and traffic that is not ours."""
    extras = malformed_packets(lab, sport=41000)
    return extras + [
        Ether(src=lab.peer.mac, dst=lab.dut.mac) / IP(src=lab.peer.ipv4, dst=lab.dut.ipv4) / ICMP(),
        udp_packet(lab, b"\x12\x34 not a token port", sport=5353, dport=53),
        # A first fragment of a token-port datagram: passed, never parsed.
        Ether(src=lab.peer.mac, dst=lab.dut.mac)
        / IP(src=lab.peer.ipv4, dst=lab.dut.ipv4, flags="MF", id=7)
        / UDP(sport=41999, dport=frames.DEFAULT_PORT) / Raw(b"x" * 64),
    ]


def transcript(streams: int = 4, seed: int = 7) -> list[str]:
    """Conversations as transcript lines (pyxdp.lab.replay's JSONL schema), with
    a made-up streaming cadence: most gaps between token datagrams near
    20 ms, some near 90 ms, a token or two per datagram. Streams start a
    little apart."""
    rng = random.Random(seed)
    lines = []
    for i, conv in enumerate(conversations(streams, seed)):
        t = 0.05 * i + rng.uniform(0, 0.02)
        request_at, toks = t, []
        t += rng.uniform(0.05, 0.1)  # time to first token
        pending = conv.tokens()
        while pending:
            for _ in range(min(len(pending), rng.choice((1, 1, 2)))):
                toks.append({"t": round(t, 6), "text": pending.pop(0)})
            t += rng.uniform(0.085, 0.092) if rng.random() < 0.2 else rng.uniform(0.017, 0.023)
        lines.append(json.dumps({
            "id": f"stream{conv.sport - 40000}", "sport": conv.sport, "ipv6": conv.ipv6,
            "request": {"t": round(request_at, 6), "body": {"model": "demo", "prompt": conv.prompt}},
            "tokens": toks,
            "done": {"t": round(t, 6), "usage": {"completion_tokens": len(toks)}},
        }))
    return lines


def mixed_traffic(lab: Lab, streams: int = 4, seed: int = 7) -> list:
    """Interleaved conversations, malformed datagrams and other traffic."""
    rng = random.Random(seed)
    queues = [
        [udp_packet(lab, d, sport=c.sport, ipv6=c.ipv6) for c in [conv] for d in conv.datagrams()]
        for conv in conversations(streams, seed)
    ]
    extras = non_token_packets(lab)
    packets = []
    while any(queues) or extras:
        pick = rng.randrange(len(queues) + 1)
        if pick < len(queues) and queues[pick]:
            packets.append(queues[pick].pop(0))
        elif extras:
            packets.append(extras.pop(rng.randrange(len(extras))))
    return packets


def expected_counters(packets, ports=(frames.DEFAULT_PORT,), on_malformed: str = "drop",
                      socket_registered: bool = False, direct: bool = False) -> dict[str, int]:
    """What the counters must read after PACKETS, per the reference judge.
    SOCKET_REGISTERED: an AF_XDP socket takes the queue's valid datagrams.
    DIRECT: the direct parser runs (docs/spec.md §1.7)."""
    total = counters.zero()
    for pkt in packets:
        judged = judge.expected(bytes(pkt), set(ports), on_malformed, socket_registered,
                                direct=direct)
        for key, value in judged.counters.items():
            total[key] += value
    return total


def send(lab: Lab, packets, *, inter: float = 0.0) -> int:
    """Send PACKETS from the peer end of LAB, in order. Returns the count."""
    from scapy.config import conf

    with lab.in_peer():
        sock = conf.L2socket(iface=lab.peer.ifname)
    try:
        for pkt in packets:
            sock.send(pkt)
            if inter:
                time.sleep(inter)
    finally:
        sock.close()
    return len(packets)
