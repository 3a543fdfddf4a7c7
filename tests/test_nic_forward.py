# SPDX-License-Identifier: Apache-2.0
"""XDP forwarding from one virtio_net NIC to another, through a router
namespace, on the VM rig's two NIC pairs (tests/support/nic_lab.py). A
module of its own: tests/test_nic.py holds pair 0 for all of its tests."""

import json

import pytest

from pyxdp.kernel import release
from pyxdp.lab import traffic
from pyxdp.proto import counters, frames
from pyxdp.proto.frames import DEFAULT_PORT, FrameType
from pyxdp.xdp import stats
from support import nic_lab
from support.tx_helpers import UdpReceiver

pytestmark = [pytest.mark.root, pytest.mark.kernel, pytest.mark.smoke]


@pytest.fixture(scope="module")
def routed_nics():
    """Sender -> router -> receiver over two NIC pairs, zerolayer on the
    router's way in, forwarding on, and a UDP socket at the receiver."""
    nic_lab.require(2)
    with nic_lab.NicRoutedLab() as lab:
        receiver = UdpReceiver(lab.receiver.netns, "::", DEFAULT_PORT)
        try:
            yield lab, receiver
        finally:
            receiver.close()


def forward_once(lab, receiver, count: int) -> list[bytes]:
    """COUNT token datagrams from the sender NIC to the receiver, through
    the router; the payloads that arrived."""
    sent = [frames.encode(FrameType.TOKEN, f"f{i}") for i in range(count)]
    traffic.send(lab.path, [traffic.udp_packet(lab.path, p, sport=44000) for p in sent])
    return [payload for payload, _ in receiver.drain(expect=count)]


@pytest.mark.capability("xdp_forwarding")
def test_forwarding_from_one_nic_to_another(routed_nics, cli, record_property):
    """virtio_net takes frames redirected to it only while an XDP program
    runs on it: attach says so for the way out (where the kernel tells,
    6.3+), and with zerolayer attached there too every datagram arrives."""
    lab, receiver = routed_nics
    ns, way_in, way_out = lab.router_in.netns, lab.router_in.ifname, lab.router_out.ifname
    res = json.loads(cli("attach", way_in, "--netns", ns, "--forward", "on", "--json",
                         check=True).stdout)
    try:
        assert res["mode"] == "native"
        notes = [n for n in res["forward_notes"] if n.startswith(way_out)]
        if release.at_least(6, 3):  # the kernel's netdev family tells
            assert notes == [
                f"{way_out} takes no redirected frames while no XDP program runs on it (its "
                f"driver's XDP features say so): the kernel drops every datagram forwarded "
                f"out of {way_out}; attach one there (`zerolayer attach {way_out} --netns {ns}`)"]
        before = counters.flatten(stats.read(way_in, ns)["counters"])
        assert forward_once(lab, receiver, 50) == []  # counted forwarded, dropped by the driver
        cli("attach", way_out, "--netns", ns, check=True)
        try:
            res = json.loads(cli("config", way_in, "--netns", ns, "--forward", "on", "--json",
                                 check=True).stdout)
            assert not [n for n in res["forward_notes"] if n.startswith(way_out)]
            sent = [frames.encode(FrameType.TOKEN, f"f{i}") for i in range(200)]
            assert forward_once(lab, receiver, 200) == sent
        finally:
            cli("detach", way_out, "--netns", ns, check=True)
        after = counters.flatten(stats.read(way_in, ns)["counters"])
        assert after["forwarded"] - before["forwarded"] == 250
        record_property("seen", "native from virtio_net to virtio_net")
    finally:
        cli("detach", way_in, "--netns", ns, check=True)
