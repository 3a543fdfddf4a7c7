# SPDX-License-Identifier: Apache-2.0
"""pyxdp.xsk on real AF_XDP sockets, bound to veth queues in a lab, fed by
zerolayer's XDP program: delivery, losses, fallback, queues, bad input."""

import socket
import struct
import threading
import time

import numpy as np
import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import release
from pyxdp.lab import traffic
from pyxdp.lab import veth_lab as lab_mod
from pyxdp.proto import counters, frames
from pyxdp.proto.frames import FrameType
from pyxdp.xdp import loader
from pyxdp.xsk.socket import XskSocket
from support.xdp_helpers import live_generator
from support.xsk_helpers import (
    ZEROCOPY_REFUSED,
    drain,
    send_on_queue,
    token_packet,
    varied_packets,
    xdp_counters,
)

pytestmark = pytest.mark.root

# --- fixtures and helpers -----------------------------------------------------------

@pytest.fixture(scope="module")
def attached(module_lab):
    """One lab for the module: its tests read counter deltas."""
    return module_lab


@pytest.fixture(scope="module")
def generator(attached):
    return live_generator(attached.peer.ifname, attached.peer.netns)


@pytest.fixture(scope="module")
def two_queues():
    """A lab whose veth pair has two rx and two tx queues, zerolayer
    attached, and a generator in its peer namespace."""
    with lab_mod.Lab(rx_queues=2) as lab:
        loader.attach(lab.dut.ifname, netns=lab.dut.netns)
        try:
            yield lab, live_generator(lab.peer.ifname, lab.peer.netns)
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)


def xsk(lab, queue=0, **options) -> XskSocket:
    return XskSocket(lab.dut.ifname, queue, netns=lab.dut.netns, **options)


# --- delivery -----------------------------------------------------------------------

@pytest.mark.kernel
@pytest.mark.smoke
@pytest.mark.capability("af_xdp_copy")
def test_every_frame_arrives_once_in_order_with_exact_bytes(attached, record_property):
    packets = varied_packets(attached)
    sent = [bytes(p) for p in packets]
    before = xdp_counters(attached)
    with xsk(attached) as sock:
        assert sock.mode == "copy"  # veth has no zero-copy AF_XDP
        record_property("seen", f"{sock.mode} mode on veth")
        traffic.send(attached, packets)
        got_batches = []
        deadline = time.monotonic() + 10
        while sum(len(b[0]) for b in got_batches) < len(sent) and time.monotonic() < deadline:
            batch = sock.recv(64, timeout=0.5)
            if batch:
                got_batches.append((
                    [bytes(batch.packet(i)) for i in range(len(batch))],
                    [bytes(batch.payload(i)) for i in range(len(batch))],
                    [batch.source(i) for i in range(len(batch))],
                    [batch.destination(i) for i in range(len(batch))],
                    batch.queue,
                ))
                batch.release()
        extra = drain(sock, quiet_s=0.3)
        st = sock.statistics()
    got = [p for b in got_batches for p in b[0]]
    assert got == sent and not extra  # once each, in order, byte for byte
    payloads = [p for b in got_batches for p in b[1]]
    assert payloads == [bytes(p[Raw].load) for p in packets]
    sources = [s for b in got_batches for s in b[2]]
    destinations = [d for b in got_batches for d in b[3]]
    for pkt, src, dst in zip(packets, sources, destinations):
        if IPv6 in pkt:
            assert (src, dst) == (f"[{attached.peer.ipv6}]:{pkt[UDP].sport}",
                                  f"[{attached.dut.ipv6}]:{frames.DEFAULT_PORT}")
        else:
            assert (src, dst) == (f"{attached.peer.ipv4}:{pkt[UDP].sport}",
                                  f"{attached.dut.ipv4}:{frames.DEFAULT_PORT}")
    assert {b[4] for b in got_batches} == {0}
    assert st.lost == 0
    delta = counters.delta(xdp_counters(attached), before)
    assert delta["redirected"] == len(sent) and delta["fallback_passed"] == 0


def test_batch_views_are_views_into_umem(attached):
    with xsk(attached) as sock:
        traffic.send(attached, [traffic.udp_packet(attached, frames.encode(FrameType.TOKEN, "v"),
                                                   sport=40000)])
        with sock.recv(timeout=2) as batch:
            assert len(batch) == 1
            addr, length = int(batch.addr[0]), int(batch.length[0])
            view = batch.packet(0)
            # No copy: the view is memory of the UMEM array.
            assert np.shares_memory(np.frombuffer(view, np.uint8), batch.umem)
            assert bytes(view) == batch.umem[addr:addr + length].tobytes()
            h = batch.headers
            assert (int(h.sport[0]), int(h.dport[0]), int(h.ip_version[0])) == (40000, 9977, 4)


# --- losses ---------------------------------------------------------------------------

SENT = 20000


@pytest.mark.parametrize("rx_size,umem_frames,reason", [
    (64, 4096, "rx_ring_full"),  # the RX ring fills first
    (2048, 64, "rx_fill_ring_empty_descs"),  # the chunks run out first
])
def test_overload_losses_add_up_to_sent_minus_received(attached, generator, rx_size,
                                                       umem_frames, reason):
    packet = token_packet(attached, "overload")
    before = xdp_counters(attached)
    with xsk(attached, rx_size=rx_size, frames=umem_frames) as sock:
        generator.send(packet, SENT)  # nobody reads meanwhile
        received = len(drain(sock))
        st = sock.statistics()
    delta = counters.delta(xdp_counters(attached), before)
    assert delta["packets"] == delta["redirected"] == SENT
    assert received == min(rx_size, umem_frames)
    assert getattr(st, reason) > 0
    # Copy mode: a frame lost to an empty fill ring is also counted as rx_dropped.
    assert st.rx_dropped == st.rx_fill_ring_empty_descs
    assert received + st.lost == SENT


def test_losses_add_up_with_a_slow_reader(attached, generator):
    """Overload while reading: the reader sleeps between batches."""
    packet = token_packet(attached, "slow")
    count = 200_000
    before = xdp_counters(attached)
    with xsk(attached, rx_size=256, frames=512) as sock:
        sender = threading.Thread(target=generator.send, args=(packet, count))
        sender.start()
        received = 0
        while sender.is_alive():
            with sock.recv(64, timeout=0.05) as batch:
                received += len(batch)
            time.sleep(0.0005)
        sender.join()
        received += len(drain(sock))
        st = sock.statistics()
    delta = counters.delta(xdp_counters(attached), before)
    assert delta["redirected"] == count
    assert st.lost > 0, "the reader kept up: no overload happened"
    assert received + st.rx_ring_full + st.rx_dropped == count


def test_chunks_recycle_for_ever_with_a_small_umem(attached, generator):
    """64 chunks carry a million frames: every released chunk goes back to
    the fill ring, however fast the reader returns it."""
    packet = token_packet(attached, "again")
    count = 1_000_000
    with xsk(attached, rx_size=64, frames=64) as sock:
        sender = threading.Thread(target=generator.send, args=(packet, count))
        sender.start()
        received = 0
        while sender.is_alive():  # busy: back the moment the kernel flushes
            with sock.recv(64, timeout=0) as batch:
                received += len(batch)
        sender.join()
        received += len(drain(sock))
        st = sock.statistics()
    assert received > 64 * 10
    assert received + st.lost == count


# --- registration -----------------------------------------------------------------------

@pytest.mark.kernel
def test_after_close_valid_frames_fall_back_to_the_kernel(attached):
    packets = [traffic.udp_packet(attached, frames.encode(FrameType.TOKEN, f"t{i}"), sport=40000)
               for i in range(5)]
    with attached.in_dut():
        kernel = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    kernel.bind((attached.dut.ipv4, frames.DEFAULT_PORT))
    kernel.settimeout(2)
    try:
        with xsk(attached) as sock:
            before = xdp_counters(attached)
            traffic.send(attached, packets)
            assert len(drain(sock, expect=5)) == 5
            mid = xdp_counters(attached)
            assert counters.delta(mid, before)["redirected"] == 5
        assert sock.closed
        traffic.send(attached, packets)
        heard = [kernel.recv(2048) for _ in packets]
    finally:
        kernel.close()
    assert heard == [bytes(p[Raw].load) for p in packets]
    delta = counters.delta(xdp_counters(attached), mid)
    assert delta["fallback_passed"] == 5 and delta["redirected"] == 0


def test_a_stale_xskmap_entry_is_replaced(two_queues):
    """An entry at key 0 whose socket is bound elsewhere (queue 1) makes the
    kernel drop queue 0's redirected frames; a socket for queue 0 replaces it."""
    lab, gen = two_queues
    packet = token_packet(lab, "to queue 0")
    with xsk(lab, 1) as other:
        other._xsks.update(0, struct.pack("=I", other.fileno()))  # the stale entry
        before = xdp_counters(lab)
        send_on_queue(gen, packet, 50, queue=0)
        assert counters.delta(xdp_counters(lab), before)["redirected"] == 50
        assert drain(other) == []  # bound to queue 1: the kernel refused them
        with xsk(lab, 0) as mine:
            send_on_queue(gen, packet, 50, queue=0)
            assert drain(mine, expect=50) == [packet] * 50


def test_one_socket_per_queue_is_enforced(attached):
    with xsk(attached):
        with pytest.raises(ZerolayerError, match="already has an AF_XDP socket bound"):
            xsk(attached)


# --- multi-queue ------------------------------------------------------------------------

@pytest.mark.kernel
@pytest.mark.capability("af_xdp_copy")
def test_two_queues_each_socket_gets_its_queue(two_queues):
    lab, gen = two_queues
    to_q0, to_q1 = token_packet(lab, "for queue 0"), token_packet(lab, "for queue 1", 40001)
    before = xdp_counters(lab)
    with xsk(lab, 0) as q0, xsk(lab, 1) as q1:
        send_on_queue(gen, to_q0, 300, queue=0)
        send_on_queue(gen, to_q1, 200, queue=1)
        got0, got1 = drain(q0, expect=300), drain(q1, expect=200)
        with q1.recv() as empty:
            assert empty.queue == 1 and not empty
    assert got0 == [to_q0] * 300 and got1 == [to_q1] * 200
    delta = counters.delta(xdp_counters(lab), before)
    assert delta["redirected"] == 500 and delta["fallback_passed"] == 0


def test_a_queue_without_a_socket_falls_back_to_the_kernel(two_queues):
    lab, gen = two_queues
    to_q0, to_q1 = token_packet(lab, "nobody on 0"), token_packet(lab, "on 1", 40001)
    with xsk(lab, 1) as q1:
        before = xdp_counters(lab)
        send_on_queue(gen, to_q0, 100, queue=0)
        send_on_queue(gen, to_q1, 40, queue=1)
        got = drain(q1, expect=40)
    delta = counters.delta(xdp_counters(lab), before)
    assert got == [to_q1] * 40
    assert delta["fallback_passed"] == 100 and delta["redirected"] == 40


# --- bad input ---------------------------------------------------------------------------

def _frames_around_the_chunk_size(lab) -> list:
    """Token datagrams of 100 to 2600 bytes on the wire, two longer than a
    2048-byte chunk holds (2048 - 256 of XDP headroom)."""
    header = len(traffic.udp_packet(lab, b"", sport=40000))
    sizes = [100, 1792, 1793, 2600, 200]
    packets = [traffic.udp_packet(
        lab, frames.encode(FrameType.TOKEN, b"x" * (size - header - 5)), sport=40000)
        for size in sizes]
    assert [len(p) for p in packets] == sizes
    return packets


def test_a_frame_larger_than_the_umem_chunk_is_dropped_and_counted():
    """A socket that takes one chunk a packet (here: it shares its UMEM to
    send) gets frames of up to 1792 bytes from 2048-byte chunks; the kernel
    drops a longer one and counts it as rx_dropped, and the frames around
    it still arrive."""
    with lab_mod.Lab(mtu=3000) as lab:
        loader.attach(lab.dut.ifname, netns=lab.dut.netns)
        try:
            with xsk(lab, chunk_size=2048, completion_size=64) as sock:
                assert sock.max_frame_len == 1792 and not sock.multi_buffer
                assert any("MTU 3000" in n and "rx_dropped" in n for n in sock.notes())
                packets = _frames_around_the_chunk_size(lab)
                before = xdp_counters(lab)
                traffic.send(lab, packets)
                got = drain(sock, expect=3)
                st = sock.statistics()
            assert [len(p) for p in got] == [100, 1792, 200]
            assert st.rx_dropped == 2 and st.rx_ring_full == 0
            # The program redirected all five: the drop happens in the socket.
            assert counters.delta(xdp_counters(lab), before)["redirected"] == 5
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)


@pytest.mark.skipif(not release.at_least(6, 6), reason="XDP_USE_SG is Linux 6.6's")
def test_a_frame_larger_than_the_umem_chunk_arrives_whole_in_pieces():
    """Otherwise the socket is bound with XDP_USE_SG: a longer frame comes in
    two chunks, joined into one packet, in order with the others."""
    with lab_mod.Lab(mtu=3000) as lab:
        loader.attach(lab.dut.ifname, netns=lab.dut.netns)
        try:
            with xsk(lab, chunk_size=2048) as sock:
                assert sock.multi_buffer and sock.describe()["multi_buffer"]
                assert not any("MTU" in note for note in sock.notes())
                packets = _frames_around_the_chunk_size(lab)
                traffic.send(lab, packets)
                got = drain(sock, expect=5)
                st = sock.statistics()
            assert got == [bytes(p) for p in packets]
            assert st.rx_dropped == 0
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)


def test_the_default_chunk_holds_a_full_mtu_frame(attached):
    with xsk(attached) as sock:
        assert sock.chunk_size == 2048
        assert not any("MTU" in note for note in sock.notes())


def test_an_interface_without_zerolayer_is_refused(lab):
    with pytest.raises(ZerolayerError, match=r"zerolayer is not attached to dut0: run "
                                             r"`zerolayer attach dut0 --netns"):
        xsk(lab)


def test_a_queue_the_interface_lacks_is_refused(attached):
    with pytest.raises(ZerolayerError, match=r"dut0 has 1 rx queue \(0-0\): there is no queue 3"):
        xsk(attached, 3)


@pytest.mark.parametrize("options,message", [
    ({"frames": 1000}, "frames must be a power of two"),
    ({"rx_size": 3}, "rx_size must be a power of two"),
    ({"chunk_size": 1024}, "chunk size must be 2048 or 4096"),
    ({"bind": "fast"}, "unknown bind mode"),
])
def test_bad_socket_options_are_refused(attached, options, message):
    with pytest.raises(ZerolayerError, match=message):
        xsk(attached, **options)


@pytest.mark.kernel
@pytest.mark.smoke
@pytest.mark.capability("af_xdp_zero_copy")
def test_zerocopy_on_veth_is_refused_not_faked(attached, record_property):
    with pytest.raises(ZerolayerError,
                       match=ZEROCOPY_REFUSED.format(iface="dut0")):
        xsk(attached, bind="zerocopy")
    with xsk(attached, bind="copy") as sock:
        assert sock.mode == "copy" and sock.mode_note is None
    record_property("seen", "veth refuses it; reported, not faked")
