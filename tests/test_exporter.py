# SPDX-License-Identifier: Apache-2.0
"""`zerolayer exporter`: after a known replay, /metrics (parsed with
prometheus_client's own parser) says what the reference judge says, and the
gap histogram holds what the replay's streams imply. Also its errors, its
clean stop, its AF_XDP part, and the Grafana dashboard's metric names."""

import json
import re
import signal
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pyxdp.lab import traffic
from pyxdp.observe import xsk_sockets
from pyxdp.proto import counters, datagram, frames
from pyxdp.proto.frames import FrameType
from pyxdp.streams.metrics import StreamMetrics
from pyxdp.xdp import loader, parsers
from support.cli_runner import ZEROLAYER
from support.ports import free_port

pytestmark = pytest.mark.root

DASHBOARD = Path(__file__).resolve().parent.parent / "grafana" / "zerolayer-dashboard.json"


@pytest.fixture
def running_exporter():
    port = free_port()
    proc = subprocess.Popen([ZEROLAYER, "exporter", "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the exporter did not come up: {proc.communicate()}") from None
                time.sleep(0.1)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def scrape(url: str) -> dict:
    """{(name, frozenset(labels)): value} of every sample."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name, **labels):
    return samples[(name, frozenset(labels.items()))]


def test_metrics_after_a_known_replay(lab, running_exporter):
    proc, url = running_exporter
    loader.attach(lab.dut.ifname, flows=True, netns=lab.dut.netns)
    try:
        packets = traffic.mixed_traffic(lab, streams=5)
        want = traffic.expected_counters(packets)
        traffic.send(lab, packets)
        time.sleep(0.2)
        got = scrape(url)
        me = {"interface": lab.dut.ifname, "netns": lab.dut.netns}
        assert value(got, "zerolayer_attached", **me) == 1
        info = [dict(k[1]) for k in got if k[0] == "zerolayer_xdp_info" and dict(k[1]).get("netns") == lab.dut.netns]
        assert len(info) == 1 and info[0]["mode"] == "native"
        assert info[0]["parser"] == parsers.for_this_kernel()

        for c in counters.COUNTERS:  # every counter, named as its row of the table says
            for reason in c.reasons:
                assert value(got, c.prometheus + "_total", **{c.by: reason}, **me) == \
                    want[f"{c.name}.{reason}"], (c.name, reason)
            if not c.by:
                assert value(got, c.prometheus + "_total", **me) == want[c.name], c.name

        # Gap samples the replay implies: every token but each stream's
        # first; bucket 0 holds the tokens that shared a datagram (scapy
        # sends datagrams far more than 1 us apart).
        convs = traffic.conversations(5)
        token_dgrams = [d for c in convs for d in c.datagrams()
                        if datagram.decode_datagram(d)[0].type == FrameType.TOKEN]
        n_tokens = sum(len(datagram.decode_datagram(d)) for d in token_dgrams)
        assert n_tokens == want["frames.token"]
        assert value(got, "zerolayer_token_gap_seconds_count", **me) == n_tokens - len(convs)
        assert value(got, "zerolayer_token_gap_seconds_bucket", le="1e-06", **me) == \
            n_tokens - len(token_dgrams)
        assert value(got, "zerolayer_token_gap_seconds_bucket", le="+Inf", **me) == n_tokens - len(convs)
        assert value(got, "zerolayer_token_gap_seconds_sum", **me) > 0
        assert value(got, "zerolayer_flows", **me) == len(convs)
        assert value(got, "zerolayer_flows_capacity", **me) == 16384
        assert value(got, "zerolayer_flow_tracking_enabled", **me) == 1
        assert value(got, "zerolayer_xsk_diag_available", netns=lab.dut.netns) in (0, 1)
    finally:
        loader.detach(lab.dut.ifname, lab.dut.netns)
    # Detached: the interface's series are gone at the next scrape.
    assert not any(dict(k[1]).get("netns") == lab.dut.netns for k in scrape(url) if k[0] != "zerolayer_xsk_diag_available")

    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "serving http://127.0.0.1:" in err and "Traceback" not in err


def test_once_prints_the_same_metrics(lab, cli):
    loader.attach(lab.dut.ifname, flows=True, netns=lab.dut.netns)
    try:
        traffic.send(lab, traffic.mixed_traffic(lab, streams=2))
        proc = cli("exporter", "--once", check=True)
    finally:
        loader.detach(lab.dut.ifname, lab.dut.netns)
    families = {f.name: f for f in text_string_to_metric_families(proc.stdout)}
    assert families["zerolayer_token_gap_seconds"].type == "histogram"
    assert families["zerolayer_frames"].type == "counter"
    assert any(s.labels.get("netns") == lab.dut.netns for s in families["zerolayer_packets"].samples)


def test_listen_errors_are_one_line(cli):
    proc = cli("exporter", "--listen", "nonsense")
    assert proc.returncode == 1 and "use HOST:PORT" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = cli("exporter", "--listen", f"127.0.0.1:{port}")
    assert proc.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sock_diag_parsing():
    """xsk_diag is not compiled into this kernel (CONFIG_XDP_SOCKETS_DIAG),
    so the dump is held to the kernel's layout (linux/xdp_diag.h) with
    crafted bytes: one bound copy-mode socket with statistics, then DONE."""
    def attr(kind, body):
        return struct.pack("=HH", 4 + len(body), kind) + body + bytes(-len(body) % 4)

    body = xsk_sockets.XDP_DIAG_MSG.pack(xsk_sockets.AF_XDP, 3, 0, 4242, 0, 0)
    body += attr(xsk_sockets.XDP_DIAG_INFO, struct.pack("=II", 7, 1))
    body += attr(xsk_sockets.XDP_DIAG_RX_RING, struct.pack("=I", 2048))
    body += attr(xsk_sockets.XDP_DIAG_UMEM_FILL_RING, struct.pack("=I", 4096))
    body += attr(xsk_sockets.XDP_DIAG_UMEM, struct.pack("=QIIIIIIII", 1 << 23, 1, 2048, 2048, 0, 7, 1, 0, 1))
    body += attr(xsk_sockets.XDP_DIAG_STATS, struct.pack("=6Q", 11, 12, 13, 14, 15, 16))
    msg = struct.pack("=IHHII", 16 + len(body), xsk_sockets.SOCK_DIAG_BY_FAMILY, 2, 1, 0) + body
    done = struct.pack("=IHHII", 20, xsk_sockets.NLMSG_DONE, 2, 1, 0) + bytes(4)
    sockets, finished, err = xsk_sockets.parse_dump(msg + done)
    assert finished and err == 0
    (s,) = sockets
    assert (s.inode, s.ifindex, s.queue, s.zerocopy, s.rx_ring, s.fill_ring) == (4242, 7, 1, False, 2048, 4096)
    assert s.stats == dict(zip(xsk_sockets.XSK_STATS, (11, 12, 13, 14, 15, 16)))
    # A kernel without xsk_diag answers the dump with an error.
    error = struct.pack("=IHHII", 36, xsk_sockets.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -2) + bytes(16)
    assert xsk_sockets.parse_dump(error) == ([], True, 2)


def test_xsk_diag_on_this_kernel():
    """The real query: either the kernel answers (a list), or it has no
    xsk_diag (None) -- and then the exporter says so in a metric."""
    sockets = xsk_sockets.xsk_sockets()
    assert sockets is None or isinstance(sockets, list)


def test_the_dashboard_uses_only_exported_metrics(lab, cli):
    loader.attach(lab.dut.ifname, flows=True, netns=lab.dut.netns)
    try:
        proc = cli("exporter", "--once", check=True)
    finally:
        loader.detach(lab.dut.ifname, lab.dut.netns)
    exported = {s.name for f in text_string_to_metric_families(proc.stdout) for s in f.samples}
    exported |= {f.name for f in text_string_to_metric_families(proc.stdout)}
    # The zerolayer_xsk_* series exist only while an AF_XDP socket is open.
    exported |= {f"zerolayer_xsk_{n}_total" for n in xsk_sockets.XSK_STATS} | {"zerolayer_xsk_info"}
    # The token streams' series are served with --streams (tests/test_exporter_streams.py
    # serves them for real): here, what their metrics render once a stream was seen.
    # the tracker's counters, all 0; a watchdog's health, well
    streams = StreamMetrics(counters=lambda: {}, health=lambda: (0.05, False))
    labels = ("client", "openai", "false", "")
    streams.first_chunk(labels, 0.1)
    streams.chunk(labels)
    streams.gap(labels, 0.01, True)
    streams.finished(labels, "done", 1)
    exported |= {s.name for f in text_string_to_metric_families(streams.render().decode())
                 for s in f.samples}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v.get("query", {}).get("query", "") if isinstance(v.get("query"), dict) else v.get("query", "")
              for v in dashboard["templating"]["list"]]
    used = {m for e in exprs for m in re.findall(r"\bzerolayer_[a-z0-9_]+", e)}
    assert used and used <= exported, used - exported


def test_af_xdp_socket_statistics_reach_the_exporter(lab, running_exporter):
    """Through sock_diag where the kernel has it, else through what the
    listener publishes: either way, a listener's real socket statistics,
    and nothing once it is gone."""
    from pyxdp.xsk import listen
    from pyxdp.xsk import published as xsk_published

    _, url = running_exporter
    loader.attach(lab.dut.ifname, netns=lab.dut.netns)
    try:
        with listen.Listener(lab.dut.ifname, netns=lab.dut.netns, frames=64) as listener:
            # 256 datagrams into 64 chunks, unread: the socket must drop some
            packet = traffic.udp_packet(lab, frames.encode(FrameType.TOKEN, "x"), sport=40000)
            traffic.send(lab, [packet] * 256)
            time.sleep(0.2)
            for _ in listener.datagrams(timeout=xsk_published.PUBLISH_EVERY_S + 0.5):
                pass  # drain, which also republishes
            want = listener.statistics()[0]
            got = scrape(url)
            labels = {"interface": lab.dut.ifname, "netns": lab.dut.netns, "queue": "0"}
            (key,) = [k for k in got if k[0] == "zerolayer_xsk_info"
                      and labels.items() <= dict(k[1]).items()]
            inode = dict(key[1])["inode"]
            assert dict(key[1])["zerocopy"] == "false"
            lost = value(got, "zerolayer_xsk_rx_dropped_total", inode=inode, **labels) + \
                value(got, "zerolayer_xsk_rx_ring_full_total", inode=inode, **labels)
            assert lost == want.lost > 0
        assert not any(k[0] == "zerolayer_xsk_info" and dict(k[1]).get("netns") == lab.dut.netns
                       for k in scrape(url)), "a closed socket is still exported"
    finally:
        loader.detach(lab.dut.ifname, lab.dut.netns)


def test_json_start_line_and_netns_filter(attached, cli):
    lab = attached
    proc = subprocess.Popen([ZEROLAYER, "exporter", "--json", "--listen", "127.0.0.1:0",
                             "--netns", lab.dut.netns],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        start = json.loads(proc.stdout.readline())
        assert (start["address"], start["netns"]) == ("127.0.0.1", lab.dut.netns)
        assert start["port"] > 0 and start["url"] == f"http://127.0.0.1:{start['port']}/metrics"
        got = scrape(start["url"])
        assert value(got, "zerolayer_attached", interface=lab.dut.ifname,
                     netns=lab.dut.netns) == 1
        # Only the namespace asked for: no host interface, no other namespace.
        assert {dict(labels).get("netns") for _, labels in got} <= {lab.dut.netns, None}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    once = cli("exporter", "--once", "--netns", lab.dut.netns, check=True)
    families = {f.name: f for f in text_string_to_metric_families(once.stdout)}
    assert {s.labels["netns"] for s in families["zerolayer_packets"].samples} == {lab.dut.netns}
    assert cli("exporter", "--once", "--json").returncode == 2
