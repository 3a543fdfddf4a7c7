# SPDX-License-Identifier: Apache-2.0
"""The delivery bench's C ceiling, pyxdp/bench/delivery/xsk_consumer.c: built as the
bench builds it, it receives on a real lab exactly the token datagrams
zerolayer redirects and walks every frame of each: its frame counts by type
and the checksum of what it read (type, length, payload's first byte) match
what the generator sent, computed here in Python. Its build is skipped, with
a note, where there is no compiler or no libxdp headers; any other compile
error stops the bench with the log kept."""

import os
import threading
from collections import Counter

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from pyxdp.bench.delivery import c_consumer, xsk_vs_udp
from pyxdp.errors import ZerolayerError
from pyxdp.lab import traffic
from pyxdp.lab.generator import Mix
from pyxdp.proto import frames
from pyxdp.proto.frames import FrameType
from support.xdp_helpers import live_generator

SENT = 12_000
RATE = 20_000  # paced: a chunk (a tenth of a second) fits the 4096-entry RX ring


def _token_payloads() -> list[bytes]:
    """Valid token datagrams' payloads, of every shape: one frame; every
    type, empty, long and non-UTF-8 payloads; the most frames a datagram may
    carry."""
    return [
        frames.encode(FrameType.TOKEN, b"t" * 16),
        (frames.encode(FrameType.REQUEST, b'{"prompt": "why"}')
         + frames.encode(FrameType.TOKEN, "Hello") + frames.encode(FrameType.TOKEN, b"\xff\x80")
         + frames.encode(FrameType.DONE) + frames.encode(FrameType.PING, b"p")
         + frames.encode(FrameType.PONG, b"q" * 1200)),
        frames.encode(FrameType.TOKEN, b"") * frames.MAX_FRAMES,
    ]


def _packets(lab) -> tuple[list[bytes], list[bytes]]:
    """(token datagrams, datagrams zerolayer must not redirect), 16 in all
    (the generator's most): each token payload over IPv4, IPv6, two VLAN
    tags with IPv4 options, and one VLAN tag with IPv6; then three malformed
    reasons, and a datagram to another port."""
    tokens = []
    for i, payload in enumerate(_token_payloads()):
        sport = 40000 + i
        tokens += [
            bytes(traffic.udp_packet(lab, payload, sport=sport)),
            bytes(traffic.udp_packet(lab, payload, sport=sport, ipv6=True)),
            bytes(Ether(src=lab.peer.mac, dst=lab.dut.mac) / Dot1Q(vlan=7) / Dot1Q(vlan=8)
                  / IP(src=lab.peer.ipv4, dst=lab.dut.ipv4, options=b"\x01\x01\x01\x00")
                  / UDP(sport=sport, dport=frames.DEFAULT_PORT) / Raw(payload)),
            bytes(Ether(src=lab.peer.mac, dst=lab.dut.mac) / Dot1Q(vlan=9)
                  / IPv6(src=lab.peer.ipv6, dst=lab.dut.ipv6)
                  / UDP(sport=sport, dport=frames.DEFAULT_PORT) / Raw(payload)),
        ]
    malformed = traffic.malformed_payloads()
    others = [bytes(traffic.udp_packet(lab, malformed[reason], sport=41000 + i))
              for i, reason in enumerate(("truncated", "unknown_type", "too_many_frames"))]
    others.append(bytes(traffic.udp_packet(lab, b"not ours", sport=5353, dport=53)))
    return tokens, others


def _walk(payload: bytes) -> tuple[Counter, int]:
    """What the C consumer must find in one datagram: frames by type name,
    and its checksum (type + length + the payload's first byte, per frame)."""
    types: Counter = Counter()
    checksum, off = 0, 0
    while off < len(payload):
        length, ftype = frames.HEADER.unpack_from(payload, off)
        body = payload[off + frames.HEADER_LEN:off + frames.HEADER_LEN + length]
        types[FrameType(ftype).label] += 1
        checksum += ftype + length + (body[0] if body else 0)
        off += frames.HEADER_LEN + length
    return types, checksum


@pytest.fixture(scope="module")
def built():
    with c_consumer.built() as build:
        yield build


def _run(lab, binary: str, mix: Mix, sent: int, count: int) -> tuple[int, dict]:
    """SENT datagrams of MIX, paced, into the C consumer told to stop after COUNT."""
    gen = live_generator(lab.peer.ifname, lab.peer.netns)
    consumer = c_consumer.CConsumer(lab, binary, count, cpu=None,
                                    xsk_options=xsk_vs_udp.XSK_OPTIONS, idle_s=0.25)
    try:
        gen.run(mix, sent, rate=RATE)
        done = threading.Event()
        done.set()
        received, _, _ = consumer.consume(count, done)
        return received, consumer.details()
    finally:
        consumer.close()


@pytest.mark.root
def test_the_c_consumer_walks_exactly_the_frames_sent(attached, built):
    assert built.binary, f"the C consumer was not built: {built.skipped}"
    tokens, others = _packets(attached)
    mix = Mix.weighted([(p, 1) for p in tokens + others])
    times = mix.counts(SENT)
    want_types: Counter = Counter()
    want_checksum = want_datagrams = 0
    for packet, n in zip(tokens, times):
        payload = bytes(Ether(packet)[UDP].payload)
        types, checksum = _walk(payload)
        for name, k in types.items():
            want_types[name] += k * n
        want_checksum += checksum * n
        want_datagrams += n
    assert set(want_types) == {"request", "token", "done", "ping", "pong"}

    received, details = _run(attached, built.binary, mix, SENT, count=SENT + 1)

    assert details["mode"] == "copy"  # veth: never claimed as zero-copy
    assert received == want_datagrams  # the malformed and the other port's never came
    assert details["malformed"] == 0, details  # every figure, to tell a flake from a bug
    assert {k: v for k, v in details["frame_types"].items() if v} == dict(want_types)
    assert details["frames_walked"] == sum(want_types.values())
    assert details["checksum"] == want_checksum
    st = details["statistics"]
    assert st["rx_dropped"] == st["rx_ring_full"] == st["rx_invalid_descs"] == 0


@pytest.mark.root
def test_the_c_consumer_stops_after_the_count_it_was_given(attached, built):
    assert built.binary, f"the C consumer was not built: {built.skipped}"
    mix = Mix.single(bytes(traffic.udp_packet(
        attached, frames.encode(FrameType.TOKEN, b"x"), sport=40000)))
    received, details = _run(attached, built.binary, mix, 3_000, count=1_000)
    assert received == details["frames_walked"] == details["frame_types"]["token"] == 1_000


def test_without_a_compiler_the_c_consumer_is_skipped_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no cc, gcc or clang
    build = c_consumer.build(str(tmp_path))
    assert build.binary is None and build.compiler is None
    assert build.skipped == "no C compiler (cc, gcc, clang) on PATH"
    assert build.to_json()["skipped"] == build.skipped


def test_without_libxdp_headers_the_c_consumer_is_skipped_with_what_to_install(tmp_path):
    """A source that includes a libxdp header this machine cannot have:
    the compiler's own complaint, recognised as a missing dev package."""
    source = tmp_path / "needs_more.c"
    source.write_text("#include <xdp/zl_not_a_header.h>\nint main(void) { return 0; }\n")
    build = c_consumer.build(str(tmp_path), source)
    assert build.binary is None and build.compiler
    assert build.skipped == "xdp/zl_not_a_header.h not found: install libxdp-dev libbpf-dev"


def test_any_other_compile_error_stops_with_the_log_kept(tmp_path):
    source = tmp_path / "broken.c"
    source.write_text("int main(void) { return not_declared; }\n")
    with pytest.raises(ZerolayerError) as failure:
        c_consumer.build(str(tmp_path), source)
    message = str(failure.value)
    assert message.startswith("compiling broken.c failed: ") and "not_declared" in message
    log = message.rsplit("(full log: ", 1)[1].rstrip(")")
    try:
        assert "not_declared" in open(log).read()
    finally:
        os.unlink(log)

