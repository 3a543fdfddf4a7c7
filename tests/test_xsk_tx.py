# SPDX-License-Identifier: Apache-2.0
"""AF_XDP transmit on real veth pairs: `zerolayer emit` and TokenSender on
the lab's peer0 (which runs no XDP program: copy-mode sending needs none),
received in the dut namespace by a UDP socket (the kernel checks every
checksum on the way), by a raw capture of dut0 (for the reference judge)
and by zerolayer's counters on dut0 (what arrived at XDP)."""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from pyxdp.errors import ZerolayerError
from pyxdp.proto import counters, datagram, judge
from pyxdp.proto.frames import DEFAULT_PORT, Frame, FrameType
from pyxdp.xdp import stats
from pyxdp.xsk.sender import TokenSender
from pyxdp.xsk.tx import XskTxSocket
from support.cli_runner import ZEROLAYER
from support.tx_helpers import (
    Capture,
    UdpReceiver,
    echo_from_own_chunks,
    emitted_payload,
    enable_peer_ipv6,
    udp_counters,
)
from support.xdp_helpers import one_line_error
from support.xsk_helpers import ZEROCOPY_REFUSED

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def lab(module_lab):
    """The module's lab, zerolayer on dut0, IPv6 on at the peer too."""
    enable_peer_ipv6(module_lab)
    return module_lab


def address(lab, version: int) -> str:
    return f"[{lab.dut.ipv6}]" if version == 6 else lab.dut.ipv4


def token_datagrams(lab) -> int:
    return counters.flatten(stats.read(lab.dut.ifname, lab.dut.netns)["counters"])[
        "token_datagrams"]


def emit(lab, *args, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([ZEROLAYER, "emit", lab.peer.ifname, "--netns", lab.peer.netns,
                           *map(str, args)], capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.usefixtures("each_core")
# --- exact datagrams ------------------------------------------------------------------

@pytest.mark.kernel
@pytest.mark.capability("af_xdp_tx")
@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("k,b", [(1, 16), (4, 40)])
def test_emit_delivers_exactly_n_datagrams_with_exact_bytes(lab, version, k, b, record_property):
    n = 2000
    receiver, capture = UdpReceiver.at_dut(lab, version, DEFAULT_PORT), Capture(lab)
    udp_before, counted_before = udp_counters(lab, version), token_datagrams(lab)
    try:
        proc = emit(lab, "--to", f"{address(lab, version)}:{DEFAULT_PORT}", "--count", n,
                    "--frames-per-datagram", k, "--payload-size", b, "--json")
        got = receiver.drain(expect=n)
        frames = capture.udp_to(DEFAULT_PORT)
    finally:
        receiver.close()
        capture.close()
    report = json.loads(proc.stdout)
    assert (report["submitted"], report["completed"]) == (n, n)
    assert set(report["not_sent"].values()) == {0}
    assert report["mode"] == "copy"  # veth: never claimed zero-copy
    record_property("seen", "copy mode on veth, IPv4 and IPv6")
    # Exactly N, in order, byte for byte, from the source the report names.
    assert [payload for payload, _ in got] == [emitted_payload(d, k, b) for d in range(n)]
    host, _, port = report["from"].rpartition(":")
    assert {(src[0], src[1]) for _, src in got} == {(host.strip("[]"), int(port))}
    # The kernel's UDP stack took every checksum: no error counted.
    udp_after = udp_counters(lab, version)
    for name in ("InCsumErrors", "InErrors"):
        assert udp_after[name] == udp_before[name], name
    assert udp_after["InDatagrams"] - udp_before["InDatagrams"] == n
    # The reference judge and the XDP program both find every one valid.
    assert len(frames) == n
    for frame in frames:
        verdict = judge.expected(frame, {DEFAULT_PORT})
        assert verdict.counters["token_datagrams"] == 1 and verdict.action == judge.XDP_PASS
        assert verdict.judgement.frames[FrameType.TOKEN - 1] == k
    assert token_datagrams(lab) - counted_before == n


@pytest.mark.kernel
def test_a_rate_paces_the_datagrams(lab):
    receiver = UdpReceiver.at_dut(lab, 4, DEFAULT_PORT)
    try:
        report = json.loads(emit(lab, "--to", f"{lab.dut.ipv4}:{DEFAULT_PORT}", "--count", 600,
                                 "--rate", 3000, "--json").stdout)
        got = receiver.drain(expect=600)
    finally:
        receiver.close()
    assert len(got) == report["completed"] == 600
    # 600 at 3000/s take 0.2 s, less the first millisecond's burst: no
    # faster than asked; the lower bound leaves room for a busy machine.
    assert report["rate"] == 3000
    assert 600 <= report["rate_pps"] <= 3000 * 1.1
    assert report["elapsed_s"] >= 0.19


@pytest.mark.kernel
def test_ctrl_c_stops_reaps_and_reports(lab):
    before = token_datagrams(lab)
    proc = subprocess.Popen([ZEROLAYER, "emit", lab.peer.ifname, "--netns", lab.peer.netns,
                             "--to", f"{lab.dut.ipv4}:{DEFAULT_PORT}", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()  # it says so once it is sending
        assert started.startswith("emitting on"), started
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["interrupted"] and report["count"] is None
    assert report["submitted"] == report["completed"] > 0
    assert report["not_sent"]["in_flight"] == 0
    time.sleep(0.2)
    assert token_datagrams(lab) - before == report["completed"] - report["link"]["tx_dropped"]


@pytest.mark.usefixtures("each_core")
# --- packing frames -------------------------------------------------------------------

@pytest.mark.kernel
@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("payload,count,per_datagram", [
    (b"t" * 16, 100, [32, 32, 32, 4]),  # the frame budget (docs/spec.md §1.4) ends each
    (b"x" * 300, 20, [4, 4, 4, 4, 4]),  # the MTU does: 4 x 305 bytes fit 1472 (or 1452)
])
def test_send_packs_frames_up_to_the_mtu_and_32_frames(lab, version, payload, count,
                                                       per_datagram):
    sent = [Frame(FrameType.TOKEN, payload + str(i).encode()) for i in range(count)]
    receiver = UdpReceiver.at_dut(lab, version, DEFAULT_PORT)
    try:
        with TokenSender(lab.peer.ifname, f"{address(lab, version)}:{DEFAULT_PORT}",
                         netns=lab.peer.netns) as sender:
            assert sender.send(sent) == len(per_datagram)
            assert sender.flush() == 0
            limit = sender.max_payload
        got = [datagram.decode_datagram(p) for p, _ in receiver.drain(len(per_datagram))]
    finally:
        receiver.close()
    assert limit == 1500 - (28 if version == 4 else 48)
    assert [len(d) for d in got] == per_datagram
    assert [f for d in got for f in d] == sent


@pytest.mark.kernel
def test_the_route_mtu_bounds_the_datagrams(lab):
    from pyroute2 import IPRoute

    with lab.in_peer(), IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=lab.peer.ifname)[0]
        ipr.route("add", dst=f"{lab.dut.ipv4}/32", oif=idx, metrics={"mtu": 600})
    try:
        receiver = UdpReceiver.at_dut(lab, 4, DEFAULT_PORT)
        with TokenSender(lab.peer.ifname, f"{lab.dut.ipv4}:{DEFAULT_PORT}",
                         netns=lab.peer.netns) as sender:
            assert (sender.mtu, sender.max_payload) == (600, 572)
            sender.send([Frame(FrameType.TOKEN, b"y" * 95)] * 12)  # 100 bytes each: 5 fit
            sender.flush()
            with pytest.raises(ZerolayerError, match="does not fit a datagram"):
                sender.send([Frame(FrameType.TOKEN, b"z" * 600)])
        got = receiver.drain(3)
        receiver.close()
    finally:
        with lab.in_peer(), IPRoute() as ipr:
            ipr.route("del", dst=f"{lab.dut.ipv4}/32", oif=idx)
    assert [len(p) for p, _ in got] == [500, 500, 200]


@pytest.mark.usefixtures("each_core")
# --- sharing a UMEM: send on what was received ------------------------------------------

@pytest.mark.kernel
@pytest.mark.smoke
@pytest.mark.capability("af_xdp_tx")
@pytest.mark.parametrize("version", [4, 6])
def test_a_received_datagram_is_sent_on_from_its_own_chunk(lab, version, record_property):
    """RX socket (registered with zerolayer on dut0) and TX socket on one
    queue, one UMEM: each datagram from the peer is sent back out of the
    chunk it arrived in, headers rewritten in place, and reaches a UDP
    socket in the peer namespace byte for byte. A UMEM of 64 chunks
    carries 1,000 datagrams, so completed chunks do go back to be filled.
    The peer's plain socket leaves its checksums partial (veth finishes
    none); each goes back with a full one: the peer's kernel counts no
    checksum error."""
    echo = echo_from_own_chunks(lab, version)
    assert echo.modes == ("copy", "copy")
    record_property("seen", "shared UMEM, sent from the chunk received")
    echo.check()


def test_sharing_needs_a_completion_ring(lab):
    from pyxdp.xsk.socket import XskSocket

    with XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, frames=64, rx_size=64) as rx:
        with pytest.raises(ZerolayerError, match="completion_size=2048"):
            XskTxSocket(lab.dut.ifname, 0, netns=lab.dut.netns, share_umem_of=rx)


# --- the kernel's side of sending --------------------------------------------------------

@pytest.mark.kernel
def test_copy_mode_sends_at_most_its_budget_per_kick(lab):
    """256 frames submitted at once: with the kernel's own budget (32) a
    push takes 8 kicks; where the kernel lets the budget be raised to the
    ring's size (XDP_MAX_TX_SKB_BUDGET, 6.17+), one."""
    import numpy as np

    from pyxdp.kernel import routes
    from pyxdp.xsk import headers
    from pyxdp.xsk.tx import KERNEL_BUDGET

    hop = routes.resolve(lab.dut.ipv4, lab.peer.ifname, lab.peer.netns)
    t = headers.template(hop.src_mac, hop.dst_mac, hop.src, hop.dst, 40000, DEFAULT_PORT)
    payload = Frame(FrameType.TOKEN, b"budget").encode()
    rows, lengths = headers.payload_matrix([payload] * 256)
    kicks = {}
    for budget in (KERNEL_BUDGET, 256):
        with XskTxSocket(lab.peer.ifname, 0, netns=lab.peer.netns, frames=512, tx_size=256,
                         budget=budget) as tx:
            addr = tx.chunks(256)
            headers.byte_rows(tx.umem, rows.shape[1])[addr.astype(np.int64) + t.length] = rows
            frame_len = headers.write(tx.umem, addr, lengths, headers.payload_sums(rows, lengths), t)
            assert tx.submit(addr, frame_len.astype(np.uint32)) == 256
            tx.push()
            assert tx.flush() == 0
            kicks[tx.budget] = tx.tally.kicks
    raised = 256 in kicks
    assert kicks == ({KERNEL_BUDGET: 8, 256: 1} if raised else {KERNEL_BUDGET: 8})


def test_a_queue_held_by_a_receiving_socket_is_refused_in_one_line(lab):
    from pyxdp.xsk.socket import XskSocket

    with XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, frames=64, rx_size=64):
        with pytest.raises(ZerolayerError, match="queue 0 of dut0 already has an AF_XDP socket"):
            XskTxSocket(lab.dut.ifname, 0, netns=lab.dut.netns)


# --- honest modes and errors ----------------------------------------------------------

@pytest.mark.kernel
def test_zerocopy_transmit_on_veth_is_refused_not_faked(lab):
    with pytest.raises(ZerolayerError, match=ZEROCOPY_REFUSED.format(iface=lab.peer.ifname)):
        XskTxSocket(lab.peer.ifname, 0, netns=lab.peer.netns, bind="zerocopy")
    with XskTxSocket(lab.peer.ifname, 0, netns=lab.peer.netns, bind="copy") as tx:
        assert tx.mode == "copy" and tx.mode_note is None


@pytest.mark.kernel
def test_emit_zero_copy_is_refused_in_one_line_and_copy_is_said(lab):
    argv = [ZEROLAYER, "emit", lab.peer.ifname, "--netns", lab.peer.netns,
            "--to", f"{lab.dut.ipv4}:{DEFAULT_PORT}", "--count", "1", "--json"]
    refused = subprocess.run(argv + ["--zero-copy"], capture_output=True, text=True, timeout=60)
    assert re.search(ZEROCOPY_REFUSED.format(iface=lab.peer.ifname), one_line_error(refused))
    copied = subprocess.run(argv + ["--copy"], capture_output=True, text=True, timeout=60)
    assert copied.returncode == 0, copied.stderr
    report = json.loads(copied.stdout)
    assert (report["mode"], report["note"], report["completed"]) == ("copy", None, 1)


@pytest.mark.parametrize("to,message", [
    ("10.255.0.1:9977", "no route to 10.255.0.1"),
    ("198.18.0.77:9977", "no usable neighbour entry for 198.18.0.77 on peer0"),
    ("198.18.0.2:9977", "198.18.0.2 is an address of this host"),
    ("198.18.0.255:9977", "broadcast or multicast"),
])
def test_destinations_that_cannot_be_sent_to_are_one_line(lab, to, message):
    assert message in one_line_error(emit(lab, "--to", to, "--count", 1, check=False))


@pytest.mark.parametrize("to", ["198.18.0.1", "fd00:7a1::1:9977"])
def test_a_destination_that_is_not_addr_port_is_a_usage_error(lab, to):
    proc = emit(lab, "--to", to, "--count", 1, check=False)
    assert proc.returncode == 2 and "is not ADDR:PORT" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_such_interface_is_one_line(cli):
    proc = cli("emit", "zl-nosuch0", "--to", "127.0.0.1:9977", "--count", 1)
    assert "no interface named 'zl-nosuch0'" in one_line_error(proc)


def test_frames_that_do_not_fit_the_path_are_one_line(lab):
    proc = emit(lab, "--to", f"{lab.dut.ipv4}:{DEFAULT_PORT}", "--count", 1,
                "--frames-per-datagram", 32, "--payload-size", 100, check=False)
    assert "make a 3360-byte UDP payload; this path carries at most 1472" in one_line_error(proc)


def test_not_root_is_one_line():
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "--inh-caps=-all", ZEROLAYER, "emit", "lo", "--to", "127.0.0.1:9",
                           "--count", "1"], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"]})
    assert "zerolayer emit needs root (CAP_NET_RAW" in one_line_error(proc)


def test_usage_errors_exit_2(cli):
    assert cli("emit", "lo").returncode == 2  # no --to
    assert cli("emit", "lo", "--to", "127.0.0.1:9", "--frames-per-datagram", 33).returncode == 2
    assert cli("emit", "lo", "--to", "127.0.0.1:9", "--rate", 0).returncode == 2
    assert cli("emit", "lo", "--to", "127.0.0.1:9", "--dst-mac", "nope").returncode == 2


def test_a_queue_the_interface_lacks_is_one_line(lab):
    proc = emit(lab, "--to", f"{lab.dut.ipv4}:{DEFAULT_PORT}", "--count", 1, "--queue", 7,
                check=False)
    assert "queue 7 of peer0 failed" in one_line_error(proc)
    assert "ethtool -l peer0" in proc.stderr
