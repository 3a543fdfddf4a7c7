# SPDX-License-Identifier: Apache-2.0
"""The scapy layer dissects token traffic the way scapy users expect."""

from scapy.layers.inet import IP, UDP
from scapy.packet import Padding, Raw

from pyxdp.proto import frames
from pyxdp.proto.scapy_layer import TokenFrame


def test_build_matches_codec():
    pkt = TokenFrame(type="TOKEN", data=b"hello") / TokenFrame(type="DONE")
    assert bytes(pkt) == frames.encode(frames.FrameType.TOKEN, "hello") + frames.encode(
        frames.FrameType.DONE
    )


def test_udp_9977_dissects_chained_frames():
    wire = bytes(IP() / UDP(sport=40000, dport=9977) / Raw(
        frames.encode(frames.FrameType.REQUEST, "{}") + frames.encode(frames.FrameType.TOKEN, "x")
    ))
    pkt = IP(wire)
    first = pkt[TokenFrame]
    assert first.type == frames.FrameType.REQUEST and first.data == b"{}"
    second = first.payload
    assert isinstance(second, TokenFrame) and second.data == b"x" and second.length == 1


def test_short_tail_is_padding():
    wire = bytes(IP() / UDP(dport=9977) / Raw(frames.encode(frames.FrameType.PING) + b"\x00\x01"))
    assert Padding in IP(wire)


def test_other_ports_are_not_frames():
    wire = bytes(IP() / UDP(sport=1234, dport=53) / Raw(b"\x00\x00\x00\x00\x04"))
    assert TokenFrame not in IP(wire)
