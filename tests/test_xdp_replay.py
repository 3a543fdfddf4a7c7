# SPDX-License-Identifier: Apache-2.0
"""scapy traffic from the peer namespace through a real veth pair: what
`zerolayer stats --json` reports must be exactly what the reference judge
says the capture contains."""

import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from pyxdp.lab import traffic
from pyxdp.lab import veth_lab as lab_mod
from pyxdp.proto import counters, frames, judge
from pyxdp.xdp import loader, parsers
from support.xdp_helpers import flat_counters

pytestmark = pytest.mark.root


def settle(cli, lab, want_packets: int, timeout: float = 3.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        got = flat_counters(cli, lab)
        if got["packets"] >= want_packets or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


@pytest.mark.kernel
@pytest.mark.parametrize("mode", [pytest.param("native", marks=pytest.mark.capability("xdp_native")),
                                  pytest.param("skb", marks=pytest.mark.capability("xdp_skb"))])
def test_mixed_capture_counts_exactly(cli, lab, mode, record_property):
    attached = loader.attach(lab.dut.ifname, mode=mode, netns=lab.dut.netns)
    assert attached.mode == mode
    record_property("seen", f"{attached.mode} on veth")
    packets = traffic.mixed_traffic(lab, streams=6, seed=3)
    # VLAN-tagged token traffic too (the dut has no VLAN device: the
    # datagram is judged and counted, then the kernel drops it)
    packets.append(Ether(src=lab.peer.mac, dst=lab.dut.mac) / Dot1Q(vlan=7)
                   / IP(src=lab.peer.ipv4, dst=lab.dut.ipv4) / UDP(sport=40100, dport=9977)
                   / Raw(frames.encode(frames.FrameType.TOKEN, "tagged")))
    traffic.send(lab, packets)
    got = settle(cli, lab, len(packets))
    assert got == traffic.expected_counters(packets)
    assert got["token_datagrams"] == got["fallback_passed"] + got["redirected"]


@pytest.mark.kernel
def test_malformed_pass_policy_reaches_the_kernel_socket(cli, lab):
    import socket

    loader.attach(lab.dut.ifname, on_malformed="pass", netns=lab.dut.netns)
    with lab.in_dut():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((lab.dut.ipv4, frames.DEFAULT_PORT))
    sock.settimeout(2)
    payloads = list(traffic.malformed_payloads().values())
    packets = [traffic.udp_packet(lab, p, sport=41000 + i) for i, p in enumerate(payloads)]
    traffic.send(lab, packets)
    received = sorted(sock.recv(65535) for _ in payloads)
    sock.close()
    assert received == sorted(payloads), "a passed malformed datagram lost bytes"
    got = settle(cli, lab, len(packets))
    assert got["malformed_passed"] == len(payloads) and got["malformed_dropped"] == 0


@pytest.mark.kernel
@pytest.mark.parametrize("mode", [
    pytest.param("skb", marks=pytest.mark.capability("xdp_skb")),
    pytest.param("native", marks=pytest.mark.capability("xdp_multi_buffer"))])
def test_big_datagrams_take_the_slow_reader(mode):
    """Frame headers beyond the direct-access window (~16 KiB into the
    packet) are read with bpf_xdp_load_bytes: in skb mode on a big MTU, a
    packet in one buffer; in native mode, one in several (docs/spec.md
    §1.9). They must be judged exactly as small ones."""
    if parsers.for_this_kernel() == parsers.DIRECT:
        pytest.skip("this kernel lacks bpf_xdp_load_bytes (Linux 5.18): the direct parser "
                    "passes these unjudged (tests/test_kernel_requirements.py)")
    with lab_mod.Lab(mtu=20000) as lab:
        result = loader.attach(lab.dut.ifname, mode=mode, netns=lab.dut.netns)
        assert result.mode == mode
        big = frames.encode(frames.FrameType.TOKEN, b"x" * 17000)
        payloads = [
            big + frames.encode(frames.FrameType.DONE, "{}"),         # valid, 2nd header far in
            big + frames.encode(frames.FrameType.TOKEN, "y") * 3,     # valid, 4 frames
            big + frames.HEADER.pack(0, 0x42),                        # unknown type, far in
            big + frames.HEADER.pack(99, frames.FrameType.TOKEN),     # truncated, far in
            big + b"\x00\x00",                                        # short header, far in
        ]
        packets = [traffic.udp_packet(lab, p, sport=42000 + i) for i, p in enumerate(payloads)]
        assert all(len(bytes(p)) > 17000 for p in packets)
        traffic.send(lab, packets)
        from support.cli_runner import run_cli

        got = settle(run_cli, lab, len(packets))
        assert got == traffic.expected_counters(packets)
        reasons = [judge.judge_datagram(p).reason for p in payloads]
        assert reasons == [None, None, "unknown_type", "truncated", "short_header"]
        assert got["frames.token"] == 5 and got["frames.done"] == 1
        assert counters.nest(got)["malformed"] == {
            "short_header": 1, "truncated": 1, "unknown_type": 1, "too_many_frames": 0,
            "bad_checksum": 0}
