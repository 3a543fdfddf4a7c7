# SPDX-License-Identifier: Apache-2.0
"""XDP forwarding (docs/spec.md §2.1) through a real router: three
namespaces, sender -> router -> receiver (pyxdp/lab/routed_lab.py), with
zerolayer attached to the router's ingress and datagrams counted exactly at
a UDP socket in the receiver's namespace and in the router's counters."""

import itertools
import json
import socket
import struct
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from pyxdp.kernel import bpfsys, netns
from pyxdp.lab import traffic
from pyxdp.lab.generator import XDP_MD
from pyxdp.lab.routed_lab import RoutedLab
from pyxdp.proto import counters, frames, judge
from pyxdp.proto.frames import FrameType
from pyxdp.xdp import egress, loader, netlink, stats
from pyxdp.xdp.testrun import TokenProgram
from support.tx_helpers import UdpReceiver, udp_counters_in

pytestmark = [pytest.mark.root, pytest.mark.kernel]
FORWARDING = pytest.mark.capability("xdp_forwarding")


def arrived(receiver: UdpReceiver) -> list[tuple[bytes, str, int]]:
    """(payload, source address, source port) of every datagram the
    receiver's dual-stack socket got (IPv4 sources unmapped)."""
    return [(data, addr[0].removeprefix("::ffff:"), addr[1]) for data, addr in receiver.drain()]


@pytest.fixture
def routed(request):
    """A routed lab with zerolayer on rtr0, forwarding on, and a receiver.
    Parametrize indirectly with a dict of RoutedLab options and `mode`."""
    opts = dict(getattr(request, "param", {}))
    mode = opts.pop("mode", "native")
    with RoutedLab(**opts) as lab:
        loader.attach("rtr0", mode=mode, forward=True, netns=lab.router_in.netns)
        receiver = UdpReceiver(lab.receiver.netns, "::", frames.DEFAULT_PORT)
        try:
            yield lab, receiver
        finally:
            receiver.close()
            loader.detach("rtr0", lab.router_in.netns)


def router_counters(lab) -> dict[str, int]:
    return counters.flatten(stats.read("rtr0", lab.router_in.netns)["counters"])


def packet(lab, payload: bytes, *, ipv6: bool = False, ttl: int = 64, df: bool = False,
           sport: int = 41000, dst: str | None = None) -> bytes:
    """A datagram as the sender puts it on snd0: to the router's MAC, for
    the receiver (or DST)."""
    l2 = Ether(src=lab.sender.mac, dst=lab.router_in.mac)
    if ipv6:
        l3 = IPv6(src=lab.sender.ipv6, dst=dst or lab.receiver.ipv6, hlim=ttl)
    else:
        l3 = IP(src=lab.sender.ipv4, dst=dst or lab.receiver.ipv4, ttl=ttl,
                flags="DF" if df else 0)
    return bytes(l2 / l3 / UDP(sport=sport, dport=frames.DEFAULT_PORT) / Raw(payload))


def token(text: str) -> bytes:
    return frames.encode(FrameType.TOKEN, text)


def send(lab, packets) -> None:
    traffic.send(lab.path, packets)


def delta(after, before):
    return counters.delta(after, before)


@pytest.mark.smoke
@FORWARDING
@pytest.mark.parametrize("routed", [{"mode": "native"}, {"mode": "skb"}], indirect=True,
                         ids=["native", "skb"])
@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_valid_datagrams_are_forwarded_and_malformed_never(routed, ipv6, record_property):
    lab, receiver = routed
    valid = [token(f"t{i} ") * (1 + i % 3) for i in range(40)]
    malformed = list(traffic.malformed_payloads().values())
    mixed = []
    for i, payload in enumerate(valid):
        mixed.append(packet(lab, payload, ipv6=ipv6, sport=42000 + i % 4))
        if i % 10 == 0:
            mixed.append(packet(lab, malformed[(i // 10) % len(malformed)], ipv6=ipv6))
    before = router_counters(lab)
    send(lab, mixed)
    got = arrived(receiver)
    d = delta(router_counters(lab), before)

    src = lab.sender.ipv6 if ipv6 else lab.sender.ipv4
    assert sorted(got) == sorted((p, src, 42000 + i % 4) for i, p in enumerate(valid))
    assert d["forwarded"] == d["token_datagrams"] == len(valid)
    assert d["malformed_dropped"] == 4 and d["redirected"] == d["fallback_passed"] == 0
    assert sum(d[f"forward.{r}"] for r in counters.FORWARD_REASONS) == 0
    mode = netlink.query("rtr0", lab.router_in.netns).mode
    record_property("seen", f"{mode} on veth")


@pytest.mark.smoke
@FORWARDING
@pytest.mark.parametrize("routed", [{"mode": "native"}, {"mode": "skb"}], indirect=True,
                         ids=["native", "skb"])
@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_datagrams_of_a_plain_socket_arrive_checksummed(routed, ipv6):
    """A socket in the sender's namespace leaves the UDP checksum to its
    veth (the field holds the pseudo-header sum only); XDP forwards the
    datagrams with the checksum finished, and the receiver's kernel
    accepts every one."""
    lab, receiver = routed
    dst = lab.receiver.ipv6 if ipv6 else lab.receiver.ipv4
    payloads = [token(f"plain {i}") * (1 + i % 5) for i in range(30)]
    version = 6 if ipv6 else 4
    errors_before = udp_counters_in(lab.receiver.netns, version)["InCsumErrors"]
    before = router_counters(lab)
    with netns.entered(lab.sender.netns):
        sock = socket.socket(socket.AF_INET6 if ipv6 else socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        for p in payloads:
            sock.sendto(p, (dst, frames.DEFAULT_PORT))
    got = [p for p, _, _ in arrived(receiver)]
    d = delta(router_counters(lab), before)
    assert sorted(got) == sorted(payloads)
    assert udp_counters_in(lab.receiver.netns, version)["InCsumErrors"] == errors_before
    assert d["forwarded"] == d["token_datagrams"] == len(payloads)
    assert d["malformed.bad_checksum"] == 0


@FORWARDING
@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_a_corrupted_datagram_is_never_forwarded(routed, ipv6, cli):
    """A payload byte changed after the checksum was computed: dropped as
    bad_checksum, never forwarded; the intact ones are. stats and the
    exporter show the reason."""
    from prometheus_client.parser import text_string_to_metric_families

    lab, receiver = routed
    good = packet(lab, token("intact"), ipv6=ipv6)
    bad = bytearray(good)
    bad[-1] ^= 0x20  # "intact" -> "intacT"
    before = router_counters(lab)
    send(lab, [bytes(bad)] * 3 + [good])
    assert [p for p, _, _ in arrived(receiver)] == [token("intact")]
    d = delta(router_counters(lab), before)
    assert d["malformed.bad_checksum"] == d["malformed_dropped"] == 3 and d["forwarded"] == 1
    ns = lab.router_in.netns
    snap = json.loads(cli("stats", "rtr0", "--netns", ns, "--json", check=True).stdout)
    assert snap["counters"]["malformed"]["bad_checksum"] == 3
    text = cli("exporter", "--once", check=True).stdout
    [value] = [s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "zerolayer_malformed_total" and s.labels.get("netns") == ns
               and s.labels.get("reason") == "bad_checksum"]
    assert value == 3


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_malformed_passed_by_policy_still_never_forwarded(routed, ipv6, cli):
    """Policy pass hands malformed datagrams to this host's stack; with
    forwarding on, the kernel would route those for another host on, so
    they are dropped instead. One for the router itself is passed."""
    lab, receiver = routed
    cli("config", "rtr0", "--netns", lab.router_in.netns, "--on-malformed", "pass", check=True)
    bad = traffic.malformed_payloads()["truncated"]
    before = router_counters(lab)
    local = UdpReceiver(lab.router_in.netns, "::", frames.DEFAULT_PORT)
    try:
        router_addr = lab.router_in.ipv6 if ipv6 else lab.router_in.ipv4
        send(lab, [packet(lab, bad, ipv6=ipv6)] * 3 + [packet(lab, bad, ipv6=ipv6, dst=router_addr)])
        assert [p for p, _, _ in arrived(local)] == [bad]
    finally:
        local.close()
    assert arrived(receiver) == []
    d = delta(router_counters(lab), before)
    assert d["malformed.truncated"] == 4
    assert d["malformed_dropped"] == 3 and d["malformed_passed"] == 1 and d["forwarded"] == 0


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_last_hop_is_left_to_the_kernel(routed, ipv6):
    """TTL (hop limit) 1: not forwarded, counted as ttl; the kernel answers
    with time exceeded, and the receiver gets nothing."""
    lab, receiver = routed
    before = router_counters(lab)
    send(lab, [packet(lab, token("late"), ipv6=ipv6, ttl=1)] * 3
         + [packet(lab, token("on time"), ipv6=ipv6, ttl=2)])
    assert [p for p, _, _ in arrived(receiver)] == [token("on time")]
    d = delta(router_counters(lab), before)
    assert d["forward.ttl"] == 3 and d["forwarded"] == 1 and d["fallback_passed"] == 3


@pytest.mark.parametrize("routed", [{"learn_receiver": True}], indirect=True)
@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_missing_neighbour_then_learned(routed, ipv6):
    """The router has no neighbour entry for the receiver: the first
    datagram goes to the kernel (no_neighbour), which resolves it and
    forwards; from then on XDP forwards."""
    lab, receiver = routed
    before = router_counters(lab)
    send(lab, [packet(lab, token("first"), ipv6=ipv6)])
    assert [p for p, _, _ in arrived(receiver)] == [token("first")]
    mid = router_counters(lab)
    assert delta(mid, before)["forward.no_neighbour"] == 1
    assert delta(mid, before)["forwarded"] == 0
    send(lab, [packet(lab, token(f"then {i}"), ipv6=ipv6) for i in range(20)])
    assert len(arrived(receiver)) == 20
    d = delta(router_counters(lab), mid)
    assert d["forwarded"] == 20 and d["forward.no_neighbour"] == 0


@pytest.mark.parametrize("routed", [{"egress_mtu": 1280}], indirect=True)
def test_egress_mtu_smaller_than_the_datagram(routed):
    """Too big for rtr1: counted as too_big and left to the kernel, which
    fragments an IPv4 datagram without DF (the receiver reassembles it) and
    refuses one with DF or an IPv6 one (ICMP back to the sender)."""
    lab, receiver = routed
    big = token("x" * 1300)
    small = token("fits")
    before = router_counters(lab)
    send(lab, [packet(lab, big), packet(lab, big, df=True), packet(lab, big, ipv6=True),
               packet(lab, small), packet(lab, small, ipv6=True)])
    got = sorted(p for p, _, _ in arrived(receiver))
    assert got == sorted([big, small, small])
    d = delta(router_counters(lab), before)
    assert d["forward.too_big"] == 3 and d["forwarded"] == 2


def test_local_datagrams_follow_the_normal_verdict(routed):
    lab, receiver = routed
    local = UdpReceiver(lab.router_in.netns, "::", frames.DEFAULT_PORT)
    try:
        before = router_counters(lab)
        send(lab, [packet(lab, token("for the router"), dst=lab.router_in.ipv4)])
        assert [p for p, _, _ in arrived(local)] == [token("for the router")]
    finally:
        local.close()
    d = delta(router_counters(lab), before)
    assert d["forward.local"] == 1 and d["fallback_passed"] == 1 and d["forwarded"] == 0
    assert arrived(receiver) == []


def test_forwarding_turned_off_and_on_live(routed, cli):
    """config --forward off: the kernel forwards (ip_forward is on in the
    router), nothing is lost and XDP forwards nothing; on again: XDP does."""
    lab, receiver = routed
    ns = lab.router_in.netns
    batch = [packet(lab, token(f"live {i}")) for i in range(30)]

    off = json.loads(cli("config", "rtr0", "--netns", ns, "--forward", "off", "--json",
                         check=True).stdout)
    assert off["forwarding"] is False and off["forward_notes"] == []
    before = router_counters(lab)
    send(lab, batch)
    assert len(arrived(receiver)) == 30
    d = delta(router_counters(lab), before)
    assert d["forwarded"] == 0 and d["fallback_passed"] == 30

    on = cli("config", "rtr0", "--netns", ns, "--forward", "on", check=True).stdout
    assert "forwarding on (egress: rtr0, rtr1)" in on
    before = router_counters(lab)
    send(lab, batch)
    assert len(arrived(receiver)) == 30
    assert delta(router_counters(lab), before)["forwarded"] == 30


def test_kernel_forwarding_off_is_said_and_counted(routed, cli):
    lab, receiver = routed
    ns = lab.router_in.netns
    lab.sysctl(lab.router_in, "net/ipv4/conf/rtr0/forwarding", "0")
    out = cli("config", "rtr0", "--netns", ns, "--forward", "on", check=True).stdout
    assert "note: forwarding is off for rtr0" in out and "net.ipv4.conf.rtr0.forwarding" in out
    before = router_counters(lab)
    send(lab, [packet(lab, token("nowhere"))] * 2)
    assert arrived(receiver) == []  # the kernel does not forward either
    assert delta(router_counters(lab), before)["forward.not_forwardable"] == 2


def test_an_egress_made_after_attach_needs_config(routed, cli):
    """The FIB may pick an interface the egress map does not hold yet:
    not_forwardable, and the kernel forwards it; `config --forward on`
    takes it in."""
    from pyroute2 import IPRoute

    lab, _ = routed
    ns = lab.router_in.netns
    with netns.entered(ns), IPRoute() as ipr:
        ipr.link("add", ifname="rtr2", kind="veth", peer={"ifname": "rtr2p"})
        idx = ipr.link_lookup(ifname="rtr2")[0]
        peer = ipr.link_lookup(ifname="rtr2p")[0]
        for i in (idx, peer):
            ipr.link("set", index=i, state="up")
        ipr.addr("add", index=idx, address="198.18.3.1", prefixlen=24)
        ipr.neigh("add", dst="198.18.3.9", lladdr="02:7a:03:00:00:09", ifindex=idx,
                  state="permanent")
    before = router_counters(lab)
    send(lab, [packet(lab, token("new way"), dst="198.18.3.9")])
    time.sleep(0.1)
    assert delta(router_counters(lab), before)["forward.not_forwardable"] == 1
    out = cli("config", "rtr0", "--netns", ns, "--forward", "on", check=True).stdout
    assert f"note: rtr2 is a veth whose peer rtr2p (netns {ns}) runs no XDP program" in out
    before = router_counters(lab)
    send(lab, [packet(lab, token("new way"), dst="198.18.3.9")])
    time.sleep(0.1)
    assert delta(router_counters(lab), before)["forwarded"] == 1


@pytest.mark.parametrize("routed", [{"receiver_gro": False}], indirect=True)
def test_attach_names_what_the_egress_veth_needs(routed, cli):
    lab, _ = routed
    res = json.loads(cli("attach", "rtr0", "--netns", lab.router_in.netns, "--forward", "on",
                         "--json", check=True).stdout)
    assert res["forwarding"] is True and res["egress"] == ["rtr0", "rtr1"]
    [note] = [n for n in res["forward_notes"] if n.startswith("rtr1")]
    ns = lab.receiver.netns
    if egress.gro_takes_redirects():
        assert f"peer rcv0 (netns {ns}) runs no XDP program and has GRO off" in note
        assert f"ip netns exec {ns} ethtool -K rcv0 gro on" in note
    else:
        assert f"peer rcv0 (netns {ns}) runs no XDP program: the kernel drops" in note
        assert "(before Linux 5.13 GRO is not enough)" in note and "ethtool" not in note
    assert f"zerolayer attach rcv0 --netns {ns}" in note


@pytest.mark.parametrize("routed", [{"receiver_gro": False}], indirect=True)
def test_gro_on_the_peer_is_enough_only_from_linux_5_13(routed, monkeypatch):
    """The same veth, GRO on at its peer: no note where GRO runs the peer's
    NAPI, and the XDP-program note on a kernel that reports itself older."""
    from pyxdp.kernel import ethtool, release

    lab, _ = routed
    with netns.entered(lab.receiver.netns):
        ethtool.set_gro(lab.receiver.ifname, True)
    ns = lab.router_in.netns
    if release.at_least(*egress.VETH_NAPI_BY_GRO):
        assert egress.notes("rtr0", ns, ["rtr1"]) == []
    monkeypatch.setattr(release, "version", lambda: (5, 10))
    [note] = egress.notes("rtr0", ns, ["rtr1"])
    assert note.startswith("rtr1 is a veth whose peer rcv0") and "GRO is not enough" in note


def partial_sum(sent: bytes) -> bytes:
    """SENT with its UDP checksum field holding the pseudo-header sum alone,
    as a local sender leaves it to its device (CHECKSUM_PARTIAL)."""
    seen = Ether(sent)
    l3 = seen[IPv6] if IPv6 in seen else seen[IP]
    addresses = bytes(l3)[8:40] if IPv6 in seen else bytes(l3)[12:20]
    l4 = len(sent) - len(bytes(seen[UDP]))
    pseudo = judge.ones_sum(addresses + struct.pack("!HH", 17, seen[UDP].len))
    return sent[:l4 + 6] + struct.pack("!H", pseudo) + sent[l4 + 8:]


def test_rewrite_by_test_run():
    """BPF_PROG_TEST_RUN in the router's namespace, as if the datagram came
    in on rtr0: XDP_REDIRECT, the next hop's MACs, one hop less, a correct
    IPv4 header checksum; the payload untouched; a UDP checksum left
    partial by its sender finished."""
    with RoutedLab() as lab:
        with netns.entered(lab.router_in.netns):
            prog = TokenProgram()
            prog.maps.set_forward_enabled(True)
            egress.fill(prog.maps["egress"].fd, None)
            rtr0 = socket.if_nametoindex("rtr0")
            for ipv6, partial in itertools.product((False, True), (False, True)):
                sent = packet(lab, token("rewrite me"), ipv6=ipv6, ttl=9)
                if partial:
                    sent = partial_sum(sent)
                    assert judge.classify_packet(sent).checksum == judge.CSUM_PARTIAL
                # data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex
                ctx = XDP_MD.pack(0, len(sent), 0, rtr0, 0, 0)
                before = prog.maps.read_counters()
                run = bpfsys.prog_test_run(prog.prog_fd, sent, ctx=ctx)
                d = delta(prog.maps.read_counters(), before)
                assert run.retval == 4 and d["forwarded"] == 1  # XDP_REDIRECT
                out = Ether(run.data_out)
                assert (out.dst, out.src) == (lab.receiver.mac, lab.router_out.mac)
                l3 = out[IPv6] if ipv6 else out[IP]
                assert (l3.hlim if ipv6 else l3.ttl) == 8
                if not ipv6:
                    header = bytes(l3)[:20]
                    assert judge.ones_sum(header) == 0xFFFF
                assert bytes(out[UDP].payload) == token("rewrite me")
                assert judge.classify_packet(bytes(out)).checksum == judge.CSUM_FULL
                assert bytes(out)[14:] != sent[14:] and len(run.data_out) == len(sent)




def test_stats_exporter_and_top_show_forwarding(routed, cli):
    from prometheus_client.parser import text_string_to_metric_families

    from pyxdp.observe import top
    from pyxdp.xdp import flows

    lab, receiver = routed
    ns = lab.router_in.netns
    before = flows.observe("rtr0", ns)
    t0 = time.monotonic()
    send(lab, [packet(lab, token("seen")) for _ in range(12)]
         + [packet(lab, token("ttl"), ttl=1)] * 2)
    assert len(arrived(receiver)) == 12

    snap = json.loads(cli("stats", "rtr0", "--netns", ns, "--json", check=True).stdout)
    assert snap["counters"]["forwarded"] == 12
    assert snap["counters"]["forward"] == {"no_neighbour": 0, "local": 0, "ttl": 2,
                                           "too_big": 0, "not_forwardable": 0}

    text = cli("exporter", "--once", check=True).stdout
    samples = {(s.name, s.labels.get("reason")): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.labels.get("netns") == ns}
    assert samples[("zerolayer_forwarded_total", None)] == 12
    assert samples[("zerolayer_not_forwarded_total", "ttl")] == 2
    assert samples[("zerolayer_not_forwarded_total", "local")] == 0

    now = flows.observe("rtr0", ns)
    lines = top.render([now], {(ns, "rtr0"): before}, time.monotonic() - t0, [], 1.0)
    header = next(ln for ln in lines if "FORWARD/S" in ln)
    row = next(ln for ln in lines if ln.startswith(f"{ns}/rtr0"[-32:]))
    column = header.index("FORWARD/S") + len("FORWARD/S")
    assert float(row[column - 9:column]) > 0, row

