# SPDX-License-Identifier: Apache-2.0
"""A routed lab: a sender, a router and a receiver in three network
namespaces, joined by two veth pairs.

    [<tag>-snd] snd0 ==== rtr0 [<tag>-rtr] rtr1 ==== rcv0 [<tag>-rcv]
      198.18.1.2            198.18.1.1      198.18.2.1      198.18.2.2
      fd00:7a1:1::2         fd00:7a1:1::1   fd00:7a1:2::1   fd00:7a1:2::2

The sender and the receiver route the other's subnet through the router,
which forwards (IPv4 and IPv6 forwarding on, inside its namespace only).
Addresses are from the benchmarking ranges and exist only in these
namespaces. Neighbours are static, except the router's entries for the
receiver when `learn_receiver` is set: then the router's kernel resolves
them (ARP, neighbour discovery) the first time it forwards there.

rcv0 has GRO on, so that it takes frames redirected to it by XDP on the
router (a veth accepts them only with NAPI running on its peer: an XDP
program or GRO); before Linux 5.13, where GRO is not enough, it runs an
XDP_PASS program instead. `receiver_gro=False` leaves both off, as a
default veth is.
`ipv6=False` turns IPv6 off in all three namespaces: then nothing but what
is sent on purpose crosses the lab (no neighbour discovery or multicast
listener reports), and a counter of every packet counts exactly that.

Names carry the creating pid and a random tag, as in pyxdp/lab/veth_lab.py,
whose sweep removes what a killed run left.
"""

import contextlib
import os
import pathlib
from dataclasses import dataclass

from pyxdp.kernel import ethtool, netns
from pyxdp.lab.veth_lab import Endpoint, LabEnd, NamespaceLab, new_tag, write_sysctl
from pyxdp.xdp import compiler, egress, netlink, pins

# struct ifaddrmsg flags: usable at once, not after duplicate address detection
IFA_F_NODAD = 0x02
# XDP_PASS alone, beside this module: what a veth needs on it to take
# redirected frames, and the parser bench's floor (pyxdp.bench.floors).
C_DIR = pathlib.Path(__file__).parent
PASS_BUILD = compiler.shipped("xdp_pass.bpf.c", directory=C_DIR)
PASS_FUNCTION = "xdp_pass_floor"


def attach_pass_program(end: Endpoint) -> None:
    """An XDP_PASS program on END, in native mode: the link holds it, and
    it goes with the namespace (or with the link's next program)."""
    loaded = compiler.load(PASS_BUILD, PASS_FUNCTION)
    try:
        state = netlink.query(end.ifname, end.netns)
        netlink.set_program(state.ifindex, loaded.prog_fd, "native", netns=end.netns)
    finally:
        loaded.close()


@dataclass(frozen=True)
class Path:
    """How a packet from the sender to the receiver looks on the sender's
    wire: the router's MAC, the receiver's addresses. It has a Lab's shape
    (a `peer` that sends, a `dut` it sends to, `in_peer()`), so
    pyxdp.lab.traffic and pyxdp.lab.generator build and send its packets."""

    peer: Endpoint
    dut: Endpoint

    @contextlib.contextmanager
    def in_peer(self):
        with netns.entered(self.peer.netns):
            yield


class RoutedLab(NamespaceLab):
    """Use as a context manager: the three namespaces (with their veths) and
    any pins under them are removed on exit, whatever happened."""

    SENDER_MAC = "02:7a:01:00:00:02"
    ROUTER_IN_MAC = "02:7a:01:00:00:01"
    ROUTER_OUT_MAC = "02:7a:02:00:00:01"
    RECEIVER_MAC = "02:7a:02:00:00:02"

    def __init__(self, *, learn_receiver: bool = False, receiver_gro: bool = True,
                 egress_mtu: int = 1500, ipv6: bool = True):
        tag = new_tag()
        self.ipv6 = ipv6
        self.learn_receiver = learn_receiver
        self.receiver_gro = receiver_gro
        self.egress_mtu = egress_mtu
        self.sender = LabEnd(f"{tag}-snd", "snd0", self.SENDER_MAC, "198.18.1.2",
                             "fd00:7a1:1::2")
        self.router_in = LabEnd(f"{tag}-rtr", "rtr0", self.ROUTER_IN_MAC, "198.18.1.1",
                                "fd00:7a1:1::1")
        self.router_out = LabEnd(f"{tag}-rtr", "rtr1", self.ROUTER_OUT_MAC, "198.18.2.1",
                                 "fd00:7a1:2::1")
        self.receiver = LabEnd(f"{tag}-rcv", "rcv0", self.RECEIVER_MAC, "198.18.2.2",
                               "fd00:7a1:2::2")
        self.path = Path(self.sender, Endpoint(self.router_in.netns, self.router_in.ifname,
                                               self.router_in.mac, self.receiver.ipv4,
                                               self.receiver.ipv6))

    @property
    def namespaces(self) -> tuple[str, str, str]:
        return (self.sender.netns, self.router_in.netns, self.receiver.netns)

    def _build(self) -> None:
        for name in self.namespaces:
            netns.create(name)
            # No duplicate address detection, link-local addresses included:
            # until it ends the router cannot solicit a neighbour (about 2 s).
            with netns.entered(name):
                for scope in ("all", "default"):
                    write_sysctl(f"net/ipv6/conf/{scope}/accept_dad", "0")
                    if not self.ipv6:
                        write_sysctl(f"net/ipv6/conf/{scope}/disable_ipv6", "1")
        with netns.entered(self.router_in.netns):
            for version in ("ipv4", "ipv6"):
                for scope in ("all", "default"):
                    write_sysctl(f"net/{version}/conf/{scope}/forwarding", "1")
        self._veth(self.sender, self.router_in)
        self._veth(self.receiver, self.router_out)
        self._link_up(self.sender, mtu=1500)
        self._link_up(self.router_in, mtu=1500)
        self._link_up(self.router_out, mtu=self.egress_mtu)
        self._link_up(self.receiver, mtu=1500)
        if self.receiver_gro:
            if egress.gro_takes_redirects():
                with netns.entered(self.receiver.netns):
                    ethtool.set_gro(self.receiver.ifname, True)
            else:
                attach_pass_program(self.receiver)
        # The two ends route through the router; the router has both subnets.
        self._route(self.sender, via=self.router_in, to=self.receiver)
        self._route(self.receiver, via=self.router_out, to=self.sender)
        self._neighbour(self.sender, self.router_in)
        self._neighbour(self.router_in, self.sender)
        self._neighbour(self.receiver, self.router_out)
        if not self.learn_receiver:
            self._neighbour(self.router_out, self.receiver)

    @staticmethod
    def _veth(a: LabEnd, b: LabEnd) -> None:
        from pyroute2 import IPRoute

        b_fd = os.open(netns.path(b.netns), os.O_RDONLY)
        try:
            with netns.entered(a.netns), IPRoute() as ipr:
                one = {"num_rx_queues": 1, "num_tx_queues": 1}
                ipr.link("add", ifname=a.ifname, kind="veth", address=a.mac,
                         peer={"ifname": b.ifname, "address": b.mac, "net_ns_fd": b_fd, **one},
                         **one)
        finally:
            os.close(b_fd)

    def _link_up(self, end: LabEnd, mtu: int) -> None:
        from pyroute2 import IPRoute

        with netns.entered(end.netns), IPRoute() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            idx = ipr.link_lookup(ifname=end.ifname)[0]
            ipr.link("set", index=idx, mtu=mtu)
            ipr.addr("add", index=idx, address=end.ipv4, prefixlen=24)
            if self.ipv6:
                ipr.addr("add", index=idx, address=end.ipv6, prefixlen=64, flags=IFA_F_NODAD)
            ipr.link("set", index=idx, state="up")

    def _route(self, end: LabEnd, *, via: LabEnd, to: LabEnd) -> None:
        from pyroute2 import IPRoute

        with netns.entered(end.netns), IPRoute() as ipr:
            ipr.route("add", dst=to.ipv4.rsplit(".", 1)[0] + ".0/24", gateway=via.ipv4)
            if self.ipv6:
                ipr.route("add", dst=to.ipv6.rsplit(":", 1)[0] + ":/64", gateway=via.ipv6)

    def _neighbour(self, end: LabEnd, other: LabEnd) -> None:
        from pyroute2 import IPRoute

        with netns.entered(end.netns), IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=end.ifname)[0]
            for address in (other.ipv4, other.ipv6) if self.ipv6 else (other.ipv4,):
                ipr.neigh("add", dst=address, lladdr=other.mac, ifindex=idx, state="permanent")

    def teardown(self) -> None:
        for name in self.namespaces:
            netns.remove(name)
            pins.remove_netns_tree(name)

    def sysctl(self, end: LabEnd, key: str, value: str) -> None:
        """Set /proc/sys/KEY inside END's namespace."""
        with netns.entered(end.netns):
            write_sysctl(key, value)
