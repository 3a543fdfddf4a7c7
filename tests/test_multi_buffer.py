# SPDX-License-Identifier: Apache-2.0
"""Jumbo frames through multi-buffer XDP (docs/spec.md §1.9): the C program
against the reference judge on datagrams of up to 8,972 bytes, through
BPF_PROG_TEST_RUN, which hands a frags program a packet longer than a page
in several buffers; then a veth pair at MTU 9000, where `zerolayer attach`
runs native, `zerolayer listen` gets 8 KB datagrams of 32 frames whole, and
a socket that takes one chunk a packet leaves them to the kernel, whole;
and the VM rig's virtio_net pair at MTU 9000 (elsewhere that test skips)."""

import json
import os
import random
import socket
import struct

import pytest

from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel import release
from pyxdp.lab import traffic, veth_lab
from pyxdp.proto import datagram, frames, judge
from pyxdp.proto.frames import FrameType
from pyxdp.xdp import loader, parsers
from pyxdp.xsk.socket import XskSocket
from support import nic_lab
from support.listen_runner import Listening, summary_of
from support.packets import CHECKSUMS, build, flip_payload_byte
from support.xdp_helpers import xdp_state
from support.xsk_helpers import xdp_counters

pytestmark = [pytest.mark.root, pytest.mark.kernel]

JUMBO_MTU = 9000
BIGGEST_PAYLOAD = JUMBO_MTU - 20 - 8  # UDP over IPv4: 8,972 bytes
CASES = max(200, int(os.environ.get("ZEROLAYER_DIFFERENTIAL_CASES", 20_000)) // 20)


def needs_frags() -> None:
    if parsers.for_this_kernel() != parsers.FULL:
        pytest.skip("multi-buffer XDP needs Linux 5.18 (xdp.frags, bpf_xdp_load_bytes); "
                    "this kernel gets the direct parser, which judges one buffer")


def needs_sg_sockets() -> None:
    needs_frags()
    if not release.at_least(6, 6):
        pytest.skip("an AF_XDP socket takes a packet in several chunks from Linux 6.6 "
                    "(XDP_USE_SG): here jumbo token datagrams are passed to the kernel")


def token_payload(count: int = 32, size: int = 8000) -> bytes:
    """COUNT token frames of SIZE bytes in all, each body its own letter."""
    share = size // count
    sizes = [share] * (count - 1) + [size - share * (count - 1)]
    return b"".join(frames.encode(FrameType.TOKEN, bytes([65 + i % 26]) * (n - frames.HEADER_LEN))
                    for i, n in enumerate(sizes))


def _jumbo_payload(rng: random.Random) -> bytes:
    """Valid or broken frames whose damage lies past the first buffer."""
    count = rng.choice((1, 2, 8, rng.randint(1, frames.MAX_FRAMES), frames.MAX_FRAMES))
    size = rng.randrange(3600, BIGGEST_PAYLOAD - 60)
    payload = bytearray(token_payload(count, size))
    kind = rng.random()
    if kind < 0.1:  # one frame too many
        payload += frames.encode(FrameType.PING)
    elif kind < 0.2:  # a type byte past the first buffer
        payload += b"\x00\x00\x00\x00" + bytes([rng.choice((0, 6, 0xFF))])
    elif kind < 0.3:  # cut inside the last frame or its header
        del payload[len(payload) - rng.randrange(1, 200):]
    elif kind < 0.4:  # a length field past the first buffer that lies
        at = len(payload) - (size // count)
        if at > 0:
            struct.pack_into("!I", payload, at, rng.choice((0, 1, 0xFFFF, 0xFFFFFFFF)))
    return bytes(payload[:BIGGEST_PAYLOAD - 60])


def _jumbo_packet(rng: random.Random) -> bytes:
    family = rng.choice((4, 4, 6))
    packet = build(_jumbo_payload(rng), family=family,
                   vlans=rng.choice(((), (0x8100,), (0x88A8, 0x8100))),
                   options=rng.choice((b"", b"\x01" * 8)) if family == 4 else b"",
                   checksum=rng.choice(CHECKSUMS))
    shape = rng.random()
    if shape < 0.2:  # corrupted on the way, often in the last buffer
        return flip_payload_byte(rng, packet, last=rng.random() < 0.5)
    if shape < 0.3:  # a UDP length past the packet: the kernel's UDP layer drops it
        return packet[:rng.randrange(len(packet) - 500, len(packet))]
    return packet


@pytest.mark.smoke
@pytest.mark.capability("xdp_multi_buffer")
def test_jumbo_datagrams_are_judged_whole_as_the_reference_judges_them(token_program,
                                                                         record_property):
    needs_frags()
    rng = random.Random(20261205)
    mismatches, kinds = [], {"token": 0, "malformed": 0, "bad_checksum": 0, "other": 0}
    for policy in ("drop", "pass"):
        token_program.configure([frames.DEFAULT_PORT], policy)
        for i in range(CASES // 2):
            packet = _jumbo_packet(rng)
            want = judge.expected(packet, {frames.DEFAULT_PORT}, policy)
            got = token_program.run(packet)
            if (got.action, got.counters, got.data_out) != (want.action, want.counters, packet):
                mismatches.append((policy, i, len(packet), got.action, want.action))
            c = want.counters
            kinds["token" if c["token_datagrams"] else "bad_checksum"
                  if c["malformed.bad_checksum"] else "malformed" if c["malformed_dropped"]
                  + c["malformed_passed"] else "other"] += 1
    token_program.configure([frames.DEFAULT_PORT], "drop")
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"
    assert min(kinds.values()) > CASES // 50, kinds  # every class, in numbers
    record_property("seen", "judged whole up to 8,972 bytes")


def test_forwarding_leaves_a_jumbo_datagram_to_the_normal_verdict(token_program):
    """Not every egress driver transmits a packet in several buffers: with
    forwarding on, one is counted not_forwardable and passed (spec §1.9)."""
    needs_frags()
    token_program.maps.set_forward_enabled(True)
    try:
        got = token_program.run(build(token_payload(32, 8000)))
    finally:
        token_program.maps.set_forward_enabled(False)
    assert got.action == judge.XDP_PASS
    assert {k: v for k, v in got.counters.items() if v} == {
        "packets": 1, "token_datagrams": 1, "frames.token": 32, "payload_bytes": 8000 - 32 * 5,
        "fallback_passed": 1, "forward.not_forwardable": 1}


@pytest.fixture
def jumbo():
    """A veth lab at MTU 9000; whatever the test attached to dut0 is
    detached after it."""
    with veth_lab.Lab(mtu=JUMBO_MTU) as lab:
        yield lab
        if xdp_state(lab).prog_id:
            loader.detach(lab.dut.ifname, lab.dut.netns)


def attach(cli, lab) -> dict:
    proc = cli("attach", lab.dut.ifname, "--netns", lab.dut.netns, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def send_from_peer(lab, payloads: list[bytes]) -> None:
    """PAYLOADS as UDP datagrams from the peer's kernel stack (one IP packet
    each: the MTU takes them whole)."""
    with netns_mod.entered(lab.peer.netns):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for payload in payloads:
                s.sendto(payload, (lab.dut.ipv4, frames.DEFAULT_PORT))


@pytest.mark.smoke
@pytest.mark.capability("af_xdp_multi_buffer")
def test_at_mtu_9000_attach_runs_native_and_listen_gets_8kb_datagrams_whole(cli, jumbo,
                                                                           record_property):
    needs_sg_sockets()
    lab = jumbo
    assert attach(cli, lab)["mode"] == "native"
    sent = [token_payload(32, 8000), token_payload(32, BIGGEST_PAYLOAD)]
    want = [{"type": "token", "payload": f.payload.decode()}
            for p in sent for f in datagram.decode_datagram(p)]
    # and, from scapy, jumbo datagrams broken past the first buffer
    whole = token_payload(32, 8000)
    broken = [traffic.corrupted(traffic.udp_packet(lab, whole, sport=46000)),
              traffic.udp_packet(lab, whole[:-7], sport=46001),
              traffic.udp_packet(lab, token_payload(31, 7750) + b"\0\0\0\0\x42", sport=46002)]
    listening = Listening(lab, "--count", len(want), "--timeout", 60)
    traffic.send(lab, broken)
    send_from_peer(lab, sent)
    code, out, err = listening.finish()
    assert code == 0, err
    got = [json.loads(line) for line in out.splitlines()]
    assert [{"type": g["type"], "payload": g["payload"]} for g in got] == want
    assert summary_of(err)["datagrams"] == 2 and summary_of(err)["lost"] == 0
    c = xdp_counters(lab)
    assert (c["redirected"], c["frames.token"], c["multi_buffer_passed"]) == (2, 64, 0)
    judged = traffic.expected_counters(broken, socket_registered=True)
    assert [judged[f"malformed.{r}"] for r in ("bad_checksum", "truncated", "unknown_type")] \
        == [1, 1, 1]
    assert {k: c[k] for k in judged if k.startswith("malformed")} == \
        {k: v for k, v in judged.items() if k.startswith("malformed")}
    record_property("seen", "native at MTU 9000, XDP_USE_SG socket")


@pytest.mark.smoke
@pytest.mark.capability("xdp_multi_buffer")
def test_a_socket_taking_one_chunk_a_packet_leaves_jumbo_datagrams_whole_to_the_kernel(
        cli, jumbo, record_property):
    needs_frags()
    lab = jumbo
    assert attach(cli, lab)["mode"] == "native"
    payload = token_payload(32, 8000)
    small = frames.encode(FrameType.TOKEN, "fits one chunk")
    with netns_mod.entered(lab.dut.netns):
        app = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with app:
        app.bind((lab.dut.ipv4, frames.DEFAULT_PORT))
        app.settimeout(10)
        # Sharing its UMEM with a transmit socket, it takes one chunk a packet.
        with XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, completion_size=64) as xsk:
            assert not xsk.describe()["multi_buffer"]
            assert any("multi_buffer_passed" in note for note in xsk.notes())
            send_from_peer(lab, [payload, small, payload])
            assert app.recv(65536) == payload and app.recv(65536) == payload
            with xsk.recv(16, timeout=5) as batch:
                assert [bytes(batch.payload(i)) for i in range(len(batch))] == [small]
    packet = build(payload)  # what the judge says of it, past a veth's first buffer
    want = judge.expected(packet, {frames.DEFAULT_PORT}, socket_registered=True,
                          first_buffer=4096 - 256 - 320)
    assert want.counters["multi_buffer_passed"] == 1 and want.action == judge.XDP_PASS
    c = xdp_counters(lab)
    assert (c["multi_buffer_passed"], c["redirected"], c["malformed.bad_checksum"]) == (2, 1, 0)
    record_property("seen", "native at MTU 9000; passed whole to a one-chunk socket's kernel")


@pytest.mark.smoke
@pytest.mark.capability("xdp_multi_buffer")
def test_at_mtu_9000_virtio_net_runs_native_and_judges_8kb_datagrams_whole(record_property):
    nic_lab.require(1)
    needs_frags()
    if not release.at_least(6, 3):
        pytest.skip("virtio_net runs multi-buffer XDP from Linux 6.3")
    sent = [token_payload(32, 8000), token_payload(32, BIGGEST_PAYLOAD)]
    with nic_lab.NicLab(0, mtu=JUMBO_MTU) as lab:
        assert loader.attach(lab.dut.ifname, netns=lab.dut.netns).mode == "native"
        try:
            with XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns) as xsk:
                send_from_peer(lab, sent)
                got = []
                for _ in range(20):
                    with xsk.recv(16, timeout=0.5) as batch:
                        got += [bytes(batch.payload(i)) for i in range(len(batch))]
                    if len(got) >= len(sent):
                        break
                takes_pieces, mode = xsk.multi_buffer, xsk.mode
            c = xdp_counters(lab)
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)
    assert (c["token_datagrams"], c["frames.token"], c["malformed_dropped"]) == (2, 64, 0)
    if takes_pieces:
        assert sorted(got) == sorted(sent) and c["redirected"] == 2
    else:
        assert got == [] and c["multi_buffer_passed"] == 2
    record_property("seen", f"native on virtio_net at MTU 9000 (AF_XDP {mode}"
                            f"{', XDP_USE_SG' if takes_pieces else ', passed to the kernel'})")
