# SPDX-License-Identifier: Apache-2.0
"""`zerolayer listen` as a user runs it: a process reading AF_XDP sockets on
a lab's veth, fed by zerolayer's XDP program."""

import base64
import json
import os
import re
import signal
import subprocess
import time

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

from pyxdp.lab import traffic
from pyxdp.lab import veth_lab as lab_mod
from pyxdp.lab.generator import token_mix
from pyxdp.proto import counters, datagram, frames, judge
from pyxdp.proto.frames import FrameType
from pyxdp.xdp import loader
from support.cli_runner import ZEROLAYER
from support.listen_runner import Listening, summary_of
from support.xdp_helpers import live_generator, one_line_error
from support.xsk_helpers import ZEROCOPY_REFUSED, send_on_queue, token_packet, xdp_counters

pytestmark = pytest.mark.root


def expected_records(packets, queue=0) -> list[dict]:
    """The JSON lines listen must print for PACKETS, per the reference judge."""
    out = []
    for pkt in packets:
        verdict = judge.expected(bytes(pkt), {frames.DEFAULT_PORT}, socket_registered=True)
        if verdict.action != judge.XDP_REDIRECT:
            continue
        udp = pkt[UDP]
        if IPv6 in pkt:
            src, dst = f"[{pkt[IPv6].src}]:{udp.sport}", f"[{pkt[IPv6].dst}]:{udp.dport}"
        else:
            src, dst = f"{pkt['IP'].src}:{udp.sport}", f"{pkt['IP'].dst}:{udp.dport}"
        for frame in datagram.decode_datagram(bytes(udp[Raw].load) if Raw in udp else b""):
            rec = {"src": src, "dst": dst, "type": frame.type.label}
            try:
                rec["payload"] = frame.payload.decode("utf-8")
            except UnicodeDecodeError:
                rec["payload_b64"] = base64.b64encode(frame.payload).decode()
            rec["queue"] = queue
            out.append(rec)
    return out


@pytest.mark.kernel
@pytest.mark.capability("af_xdp_copy")
def test_listen_json_prints_every_frame_in_order(attached):
    lab = attached
    odd = [traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, b"\xff\xfe raw \x80"),
                              sport=45000),
           traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, "café ☕"), sport=45001,
                              ipv6=True)]
    packets = traffic.mixed_traffic(lab, streams=3) + odd
    expected = expected_records(packets)
    listening = Listening(lab, "--count", len(expected), "--timeout", 60)
    traffic.send(lab, packets)
    code, out, err = listening.finish()
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines == expected
    for line in lines:  # exactly docs/spec.md §5.7's keys, in its order
        assert list(line) in (["src", "dst", "type", "payload", "queue"],
                              ["src", "dst", "type", "payload_b64", "queue"])
    assert base64.b64decode(lines[-2]["payload_b64"]) == b"\xff\xfe raw \x80"
    assert lines[-1]["payload"] == "café ☕" and lines[-1]["src"].startswith("[fd00:7a1::2]:")
    assert "Traceback" not in err
    summary = json.loads(err.splitlines()[-1])["summary"]  # the last line on stderr
    redirected = sum(judge.expected(bytes(p), {frames.DEFAULT_PORT}, socket_registered=True)
                     .action == judge.XDP_REDIRECT for p in packets)
    assert {k: summary[k] for k in ("frames", "datagrams", "lost", "broken", "unread")} == \
        {"frames": len(expected), "datagrams": redirected, "lost": 0, "broken": 0, "unread": 0}


@pytest.mark.kernel
@pytest.mark.capability("af_xdp_copy")
def test_listen_modes_are_asked_for_and_said(attached, cli):
    """--zero-copy on veth (no zero-copy there) is refused in one line
    naming the driver; --copy listens in copy mode with no excuse to give."""
    lab = attached
    refused = one_line_error(cli("listen", lab.dut.ifname, "--netns", lab.dut.netns,
                                 "--zero-copy", "--timeout", "5"))
    assert re.search(ZEROCOPY_REFUSED.format(iface=lab.dut.ifname), refused), refused
    listening = Listening(lab, "--copy", "--count", 1, "--timeout", 60)
    assert "(copy mode;" in listening.header[-1] and not any(
        line.startswith("note:") for line in listening.header), listening.header
    traffic.send(lab, [traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, "c"), sport=45000)])
    code, _, err = listening.finish()
    assert code == 0 and '"mode": "copy"' in err, err


@pytest.mark.kernel
@pytest.mark.capability("af_xdp_copy")
@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_listen_never_prints_a_corrupted_datagram(attached, ipv6):
    """One payload byte flipped after scapy wrote the checksum: dropped by
    XDP as bad_checksum; listen prints the intact datagrams only."""
    lab = attached
    intact = [bytes(traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, f"intact {i}"),
                                       sport=46000 + i, ipv6=ipv6)) for i in range(3)]
    corrupted = [p[:-1] + bytes([p[-1] ^ 0x20]) for p in intact]  # "intact 0" -> "intact \x10"
    before = xdp_counters(lab)
    listening = Listening(lab, "--count", len(intact), "--timeout", 60)
    traffic.send(lab, [p for pair in zip(corrupted, intact) for p in pair])
    code, out, err = listening.finish()
    assert code == 0, err
    assert [json.loads(line)["payload"] for line in out.splitlines()] == \
        [f"intact {i}" for i in range(3)]
    d = counters.delta(xdp_counters(lab), before)
    assert d["malformed.bad_checksum"] == d["malformed_dropped"] == 3 and d["redirected"] == 3


def test_listen_shows_each_stream_as_text(attached):
    lab = attached
    packets = traffic.mixed_traffic(lab, streams=2)
    count = len(expected_records(packets))
    listening = Listening(lab, "--count", count, "--timeout", 60, as_json=False)
    traffic.send(lab, packets)
    code, out, err = listening.finish()
    assert code == 0, err
    assert "copy mode" in listening.header[-1]
    for conv in traffic.conversations(2):
        flow = f"{lab.peer.ipv4}:{conv.sport}"
        assert f'REQUEST "{conv.prompt}"' in out
        assert f'DONE ({len(conv.tokens())} tokens): "{conv.answer}"' in out
        assert any(line.startswith(flow) for line in out.splitlines())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_listen_cleanly_and_unregisters(attached, sig):
    lab = attached
    packet = traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, "after"), sport=40000)
    listening = Listening(lab)
    listening.proc.send_signal(sig)
    code, out, err = listening.finish()
    assert code == 0 and "Traceback" not in err, err
    before = xdp_counters(lab)
    traffic.send(lab, [packet] * 4)
    delta = counters.delta(xdp_counters(lab), before)
    assert delta["fallback_passed"] == 4 and delta["redirected"] == 0


def test_after_kill_9_the_next_listen_works(attached):
    lab = attached
    packet = traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, "hello"), sport=40000)
    first = Listening(lab)
    try:
        traffic.send(lab, [packet] * 3)
        heard = [json.loads(first.proc.stdout.readline())["payload"] for _ in range(3)]
        assert heard == ["hello"] * 3
    finally:
        first.kill()  # SIGKILL: no unregistering of its own
    # The kernel removed the dead socket from the XSKMAP: nothing is redirected into the void.
    before = xdp_counters(lab)
    traffic.send(lab, [packet] * 3)
    assert counters.delta(xdp_counters(lab), before)["fallback_passed"] == 3
    second = Listening(lab, "--count", 3, "--timeout", 60)
    traffic.send(lab, [packet] * 3)
    code, out, err = second.finish()
    assert code == 0, err
    assert [json.loads(line)["payload"] for line in out.splitlines()] == ["hello"] * 3


def test_listen_into_a_pipe_that_closes_ends_cleanly(attached):
    """`zerolayer listen --json | head -n 2`"""
    lab = attached
    packet = traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, "more"), sport=40000)
    listening = Listening(lab, "--timeout", 60)
    traffic.send(lab, [packet] * 2)
    assert [json.loads(listening.proc.stdout.readline())["payload"] for _ in range(2)] == \
        ["more"] * 2
    listening.proc.stdout.close()  # head has what it wanted
    traffic.send(lab, [packet] * 50)
    assert listening.proc.wait(timeout=30) == 0
    err = listening.proc.stderr.read()
    assert "Traceback" not in err and "error" not in err, err


@pytest.mark.parametrize("as_json", [True, False])
def test_listen_stopped_by_a_detach_prints_its_summary_then_one_line(attached, as_json):
    lab = attached
    packet = traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, "heard"), sport=40000)
    listening = Listening(lab, "--timeout", 60, as_json=as_json)
    traffic.send(lab, [packet] * 3)
    heard = listening.proc.stdout if as_json else None
    if heard is not None:  # all three printed before the detach
        assert [json.loads(heard.readline())["payload"] for _ in range(3)] == ["heard"] * 3
    loader.detach(lab.dut.ifname, lab.dut.netns)
    loader.attach(lab.dut.ifname, netns=lab.dut.netns)  # for the fixture's teardown
    code, out, err = listening.finish()
    assert code == 1 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[-1] == "zerolayer: zerolayer was detached from dut0 while listening"
    if as_json:
        summary = json.loads(lines[-2])["summary"]
        assert (summary["frames"], summary["datagrams"]) == (3, 3)
        assert [q["queue"] for q in summary["queues"]] == [0]
    else:
        assert lines[-2].startswith("3 frames in 3 datagrams on dut0 queue 0")


def test_listen_stopped_by_its_interface_vanishing_prints_its_summary(lab):
    packet = traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, "last"), sport=40000)
    loader.attach(lab.dut.ifname, netns=lab.dut.netns)
    try:
        listening = Listening(lab, "--timeout", 60)
        traffic.send(lab, [packet] * 2)
        assert [json.loads(listening.proc.stdout.readline())["payload"] for _ in range(2)] == \
            ["last"] * 2
        subprocess.run(["ip", "-n", lab.dut.netns, "link", "del", lab.dut.ifname], check=True)
        code, out, err = listening.finish()
    finally:
        loader.detach(lab.dut.ifname, lab.dut.netns)  # its stale pins
    assert code == 1 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert json.loads(lines[-2])["summary"]["frames"] == 2
    assert lines[-1].startswith("zerolayer: stopped listening on dut0: no interface named 'dut0'")


def test_listen_without_zerolayer_is_one_line_exit_1(cli, lab):
    err = one_line_error(cli("listen", lab.dut.ifname, "--netns", lab.dut.netns, "--json"))
    assert err == (f"zerolayer: zerolayer is not attached to dut0: run "
                   f"`zerolayer attach dut0 --netns {lab.dut.netns}` first")


def test_listen_on_a_queue_the_interface_lacks_is_one_line_exit_1(cli, attached):
    err = one_line_error(cli("listen", "dut0", "--netns", attached.dut.netns, "--queue", 5))
    assert err == "zerolayer: dut0 has 1 rx queue (0-0): there is no queue 5"


def test_listen_bad_options_are_usage_errors(cli, attached):
    for args in (["--count", 0], ["--timeout", 0], ["--queue", -1]):
        proc = cli("listen", "dut0", "--netns", attached.dut.netns, *args)
        assert proc.returncode == 2, (args, proc.stderr)


@pytest.mark.parametrize("option,value", [("--frames", 1000), ("--frames", 32),
                                          ("--frames", 1 << 21), ("--ring-size", 3),
                                          ("--ring-size", 0)])
def test_listen_sizes_must_be_powers_of_two_in_range(cli, attached, option, value):
    proc = cli("listen", "dut0", "--netns", attached.dut.netns, option, value)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"Error: Invalid value for '{option}': must be a power of two from 64 to 1048576, "
        f"not {value}")


def test_listen_every_queue_and_one_queue():
    with lab_mod.Lab(rx_queues=2) as lab:
        loader.attach(lab.dut.ifname, netns=lab.dut.netns)
        try:
            gen = live_generator(lab.peer.ifname, lab.peer.netns)
            to_q0, to_q1 = token_packet(lab, "zero", 40000), token_packet(lab, "one", 40001)

            everything = Listening(lab, "--count", 20, "--timeout", 60)
            assert "queues 0-1" in everything.header[-1]
            send_on_queue(gen, to_q0, 10, queue=0)
            send_on_queue(gen, to_q1, 10, queue=1)
            code, out, err = everything.finish()
            assert code == 0, err
            got = sorted((r["queue"], r["payload"]) for r in map(json.loads, out.splitlines()))
            assert got == [(0, "zero")] * 10 + [(1, "one")] * 10

            only_q1 = Listening(lab, "--queue", 1, "--count", 5, "--timeout", 60)
            before = xdp_counters(lab)
            send_on_queue(gen, to_q0, 7, queue=0)  # no socket on queue 0
            send_on_queue(gen, to_q1, 5, queue=1)
            code, out, err = only_q1.finish()
            assert code == 0, err
            assert [(r["queue"], r["payload"]) for r in map(json.loads, out.splitlines())] == \
                [(1, "one")] * 5
            delta = counters.delta(xdp_counters(lab), before)
            assert delta["fallback_passed"] == 7 and delta["redirected"] == 5
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)


@pytest.mark.kernel
@pytest.mark.capability("af_xdp_copy")
def test_a_default_veth_runs_one_queue_and_listen_binds_just_it(cli):
    """`ip link add ... type veth` allocates a queue per possible CPU but runs
    one: listen binds the queues that run (ethtool's channels), and
    `ethtool -L` changes that, as it does for a real NIC."""
    with lab_mod.Lab(rx_queues=None) as lab:
        loader.attach(lab.dut.ifname, netns=lab.dut.netns)
        try:
            status = json.loads(cli("status", lab.dut.ifname, "--netns", lab.dut.netns,
                                    "--json", check=True).stdout)
            assert status["interfaces"][0]["rx_queues"] == 1
            listening = Listening(lab, "--count", 1, "--timeout", 60)
            assert "queue 0" in listening.header[-1]
            traffic.send(lab, [token_packet(lab, "one")])
            code, out, err = listening.finish()
            assert code == 0, err
            assert [json.loads(line)["payload"] for line in out.splitlines()] == ["one"]

            err = one_line_error(cli("listen", "dut0", "--netns", lab.dut.netns, "--queue", 1))
            assert err == "zerolayer: dut0 has 1 rx queue (0-0): there is no queue 1"
            if os.cpu_count() > 1:  # a second queue to run needs a second one allocated
                subprocess.run(["ip", "netns", "exec", lab.dut.netns, "ethtool", "-L", "dut0",
                                "rx", "2"], check=True, capture_output=True)
                two = Listening(lab, "--count", 1, "--timeout", 60)
                assert "queues 0-1" in two.header[-1]
                two.kill()
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)


# --- sizing and loss ----------------------------------------------------------------

def stopped(proc) -> None:
    """SIGSTOP PROC and wait until it is stopped: from then on it reads nothing."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "the listener did not stop"
        time.sleep(0.001)


@pytest.mark.kernel
def test_a_5000_datagram_burst_arrives_whole_with_the_default_sizes(attached):
    """At the generator's full rate, far faster than any Python reader: the
    default ring and UMEM hold the whole burst, whenever the reader runs."""
    lab = attached
    mix = token_mix(lab, frames_per_datagram=2, payload_sizes=(3, 11))
    listening = Listening(lab, "--count", 10_000, "--timeout", 60)
    assert "32768 chunks of 2048 bytes, an RX ring of 32768" in listening.header[-1]
    live_generator(lab.peer.ifname, lab.peer.netns).run(mix, 5000)
    code, out, err = listening.finish()
    assert code == 0, err
    payloads = [json.loads(line)["payload"] for line in out.splitlines()]
    texts = {0: "tok", 1: "tok tok tok"}  # token_payload's text, by template
    assert payloads == [texts[mix.schedule[i // 2 % len(mix.schedule)]] for i in range(10_000)]
    summary = summary_of(err)
    assert (summary["datagrams"], summary["frames"], summary["lost"], summary["unread"]) == \
        (5000, 10_000, 0, 0)
    assert summary["sizing"] == {"frames": 32768, "chunk_size": 2048, "ring_size": 32768,
                                 "bytes_per_queue": 32768 * 2048 + 32768 * 16 + 2 * 32768 * 8}


@pytest.mark.parametrize("sizes,reason", [
    (["--frames", 128, "--ring-size", 64], "rx_ring_full"),  # the ring fills first
    (["--frames", 64, "--ring-size", 128], "no_free_chunk"),  # the chunks run out first
])
@pytest.mark.parametrize("as_json", [True, False])
@pytest.mark.kernel
def test_listen_reports_each_queues_losses_and_why(attached, sizes, reason, as_json):
    """The listener is stopped (SIGSTOP) while 20,000 datagrams arrive, so
    its socket takes exactly what its sizes hold and loses the rest; the
    report says how many and why."""
    lab = attached
    mix = token_mix(lab, frames_per_datagram=2, payload_sizes=(5,))
    listening = Listening(lab, *sizes, "--count", 128, "--timeout", 60, as_json=as_json)
    stopped(listening.proc)
    try:
        live_generator(lab.peer.ifname, lab.peer.netns).run(mix, 20_000)
    finally:
        listening.proc.send_signal(signal.SIGCONT)
    code, out, err = listening.finish()
    assert code == 0, err
    lost = 20_000 - 64
    if as_json:
        assert len(out.splitlines()) == 128
        summary = summary_of(err)
        assert (summary["datagrams"], summary["lost"], summary["unread"]) == (64, lost, 0)
        (queue,) = summary["queues"]
        assert queue["lost"] == lost and queue["lost_by_reason"][reason] == lost
        assert sum(queue["lost_by_reason"].values()) == lost
    else:
        assert err.strip().splitlines()[-1] == (
            f"128 frames in 64 datagrams on dut0 queue 0, copy mode; {lost} lost by the AF_XDP "
            f"socket; queue 0 lost {lost} ({reason} {lost})")


def test_listen_counts_what_it_received_but_did_not_print(attached):
    """--count 3 over 3,000 2-frame datagrams already in the ring: the
    second datagram is cut, and the rest are reported unread, those of the
    batch read (up to 1,024) and those still in the ring alike."""
    lab = attached
    mix = token_mix(lab, frames_per_datagram=2, payload_sizes=(5,))
    listening = Listening(lab, "--count", 3, "--timeout", 60)
    stopped(listening.proc)
    try:
        live_generator(lab.peer.ifname, lab.peer.netns).run(mix, 3000)
    finally:
        listening.proc.send_signal(signal.SIGCONT)
    code, out, err = listening.finish()
    assert code == 0, err
    assert len(out.splitlines()) == 3
    summary = summary_of(err)
    assert (summary["frames"], summary["datagrams"], summary["unread"], summary["lost"]) == \
        (3, 2, 2998, 0)


def test_listen_on_a_terminal_prints_lines_as_they_come(attached):
    import pty
    import select

    lab = attached
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([ZEROLAYER, "listen", lab.dut.ifname, "--netns", lab.dut.netns,
                             "--count", "4", "--timeout", "60"], stdout=secondary,
                            stderr=subprocess.PIPE, text=True)
    os.close(secondary)
    seen = ""

    def read_until(done) -> None:
        nonlocal seen
        while not done(seen):
            assert select.select([primary], [], [], 30)[0], f"nothing more on the terminal: {seen}"
            seen += os.read(primary, 4096).decode()

    try:
        read_until(lambda text: "listening on" in text)
        traffic.send(lab, [token_packet(lab, f"t{i}") for i in range(3)])
        read_until(lambda text: text.count(" q0 ") == 3)
        assert proc.poll() is None  # printed while still listening
        traffic.send(lab, [token_packet(lab, "t3")])
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
        read_until(lambda text: text.count(" q0 ") == 4)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
        os.close(primary)
    assert [line.split("  ")[-1] for line in seen.splitlines() if " q0 " in line] == \
        ['"t0"', '"t1"', '"t2"', '"t3"']
