# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the AF_XDP socket tests (test_xsk_socket.py,
test_xsk_listen.py, test_xsk_aio.py, test_nic.py): what the XDP program
counted, token datagrams from the peer, of one shape or of every shape,
traffic steered onto one rx queue, and a socket drained."""

import os

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from pyxdp.lab import traffic
from pyxdp.lab.generator import LiveGenerator
from pyxdp.proto import counters, frames
from pyxdp.proto.frames import FrameType
from pyxdp.xdp import stats
from pyxdp.xsk.socket import XskSocket

# How a veth's refusal of a zero-copy bind reads: in the driver's own words
# where the kernel has them (its XDP features, 6.3+), else bind's errno.
ZEROCOPY_REFUSED = r"{iface} \(veth\) (does not offer AF_XDP zero-copy|refused a zero-copy bind)"


def xdp_counters(lab) -> dict[str, int]:
    return counters.flatten(stats.read(lab.dut.ifname, lab.dut.netns)["counters"])


def token_packet(lab, text: bytes | str, sport: int = 40000) -> bytes:
    return bytes(traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, text), sport=sport))


def send_on_queue(generator: LiveGenerator, packet: bytes, count: int, queue: int) -> None:
    """veth hands a frame transmitted by XDP_TX to the peer's rx queue
    smp_processor_id() % queues (the context's rx_queue_index has no say),
    so running the generator on CPU QUEUE steers it onto queue QUEUE."""
    cpus = sorted(os.sched_getaffinity(0))
    if queue not in cpus:
        pytest.skip(f"steering to rx queue {queue} needs CPU {queue}; allowed: {cpus}")
    home = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {queue})
    try:
        generator.send(packet, count)
    finally:
        os.sched_setaffinity(0, home)


def drain(sock: XskSocket, expect: int | None = None, quiet_s: float = 0.3) -> list[bytes]:
    """Every frame the socket holds, as bytes, in ring order: until EXPECT
    have come (then a moment more, to catch any extra) or QUIET_S passes
    without one."""
    got: list[bytes] = []
    while True:
        wait = quiet_s if expect is None or len(got) < expect else 0.1
        with sock.recv(256, timeout=wait) as batch:
            if not batch:
                return got
            got.extend(bytes(batch.packet(i)) for i in range(len(batch)))


def varied_packets(lab) -> list:
    """Token datagrams of every shape the program redirects: IPv4 and IPv6,
    one and two VLAN tags, several frames, empty and non-UTF-8 payloads."""
    out = []
    for i in range(240):
        sport = 30000 + i
        if i % 4 == 0:
            payload = frames.encode(FrameType.TOKEN, f"token {i} ✓")
        elif i % 4 == 1:
            payload = frames.encode(FrameType.TOKEN, bytes([0xFF, 0xFE, i % 256, 0x80]))
        elif i % 4 == 2:
            payload = (frames.encode(FrameType.REQUEST, f'{{"prompt": "q{i}"}}')
                       + frames.encode(FrameType.TOKEN, b"\xc3\x28 not utf-8")
                       + frames.encode(FrameType.DONE))
        else:
            payload = frames.encode(FrameType.PING)
        if i % 5 == 3:
            pkt = (Ether(src=lab.peer.mac, dst=lab.dut.mac) / Dot1Q(vlan=7) / Dot1Q(vlan=8)
                   / IP(src=lab.peer.ipv4, dst=lab.dut.ipv4, options=b"\x01\x01\x01\x00")
                   / UDP(sport=sport, dport=frames.DEFAULT_PORT) / Raw(payload))
        elif i % 5 == 4:
            pkt = (Ether(src=lab.peer.mac, dst=lab.dut.mac) / Dot1Q(vlan=9)
                   / IPv6(src=lab.peer.ipv6, dst=lab.dut.ipv6)
                   / UDP(sport=sport, dport=frames.DEFAULT_PORT) / Raw(payload))
        else:
            pkt = traffic.udp_packet(lab, payload, sport=sport, ipv6=(i % 3 == 0))
        out.append(pkt)
    return out
