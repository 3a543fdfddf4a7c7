# SPDX-License-Identifier: Apache-2.0
"""The veth lab's shape on two interfaces that already exist and reach each
other (two NICs on one wire, or the VM rig's virtio-net pairs): each is
moved into a namespace of its own, in place of the veth pair.

    [netns <tag>-peer]  PEER ~~ the wire ~~ DUT  [netns <tag>-dut]

The interfaces keep their names and MACs; addresses, static neighbours and
the silent peer are the veth lab's (pyxdp.lab.veth_lab.Lab). On leaving,
each goes back to the namespace it came from, under its own name, before
the namespaces go: an interface left to the kernel's namespace clean-up
comes back later, asynchronously, and the next lab would not find it.
"""

import os
import socket
import subprocess

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns, xdp_features
from pyxdp.lab.routed_lab import attach_pass_program
from pyxdp.lab.veth_lab import Lab, LabEnd
from pyxdp.xdp import netlink


def _mac(ifname: str) -> str:
    try:
        with open(f"/sys/class/net/{ifname}/address") as f:
            return f.read().strip()
    except OSError:
        raise ZerolayerError(f"no interface named {ifname!r} here (see `ip link`)") from None


def on_interface(end: LabEnd, ifname: str) -> LabEnd:
    """END's namespace and addresses, on interface IFNAME of this namespace."""
    return LabEnd(end.netns, ifname, _mac(ifname), end.ipv4, end.ipv6)


def _move(end: LabEnd, to_fd: int) -> None:
    """Move END's interface, down, from the namespace it is in now into TO_FD's."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=end.ifname)
        if found:
            ipr.link("set", index=found[0], state="down")
            ipr.link("set", index=found[0], net_ns_fd=to_fd)


def move_into(end: LabEnd) -> None:
    """END's interface, from this namespace into END's."""
    fd = os.open(netns.path(end.netns), os.O_RDONLY)
    try:
        _move(end, fd)
    finally:
        os.close(fd)


def move_home(ends) -> None:
    """Each of ENDS' interfaces back into this namespace, under its own name."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        for end in ends:
            if netns.exists(end.netns):
                with netns.entered(end.netns):
                    _move(end, home)
    finally:
        os.close(home)


def lossless_qdisc(end: LabEnd) -> None:
    """A plain FIFO on END's interface, long enough for any burst. A default
    fq_codel drops packets that wait longer than its target (5 ms): on a
    slow machine (a VM under TCG) a sender's packet sometimes does, counted
    by no socket or device."""
    subprocess.run(["tc", "-n", end.netns, "qdisc", "replace", "dev", end.ifname, "root",
                    "pfifo", "limit", "10000"], check=True, capture_output=True)


def takes_redirects_only_with_a_program(end: LabEnd) -> bool:
    """Whether END's driver transmits frames XDP hands it (a redirect, the
    live-frames generator's XDP_TX) only while an XDP program runs on it, as
    virtio_net does: its XDP features say so (6.3+; before, nothing is known)."""
    with netns.entered(end.netns):
        ifindex = socket.if_nametoindex(end.ifname)
    features = xdp_features.read(ifindex, end.netns)
    return features is not None and features.redirect_target_only_with_a_program


def _promiscuous(end: LabEnd, on: bool) -> None:
    from pyroute2 import IPRoute

    with netns.entered(end.netns), IPRoute() as ipr:
        found = ipr.link_lookup(ifname=end.ifname)
        if found:
            ipr.link("set", index=found[0], flags=0x100 if on else 0, mask=0x100)  # IFF_PROMISC


STANDARD_MTU = 1500  # above it, a lab's frames may need multi-buffer XDP


def _set_mtu(ifname: str, mtu: int) -> None:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if found:
            ipr.link("set", index=found[0], mtu=mtu)


class PairLab(Lab):
    """The veth lab's shape on interfaces DUT and PEER of this namespace, at
    MTU while it lasts (each gets its own back on leaving)."""

    def __init__(self, dut: str, peer: str, mtu: int = 1500):
        super().__init__(mtu=mtu)
        if dut == peer:
            raise ZerolayerError(f"a pair is two interfaces, not {dut} twice")
        self.dut = on_interface(self.dut, dut)
        self.peer = on_interface(self.peer, peer)
        self._home_mtu = {name: netlink.query(name).mtu for name in (dut, peer)}
        self._peer_program = False

    def _build(self) -> None:
        self._make_namespaces()
        for end in (self.dut, self.peer):
            move_into(end)
            self._configure(end)
        lossless_qdisc(self.peer)
        # Some NICs (qemu's virtio-net) drop frames tagged with a VLAN id the
        # host has not registered; promiscuous mode turns that filter off, so
        # tagged datagrams reach XDP.
        _promiscuous(self.dut, True)
        # So the generator's frames leave the peer. Not above the standard
        # MTU: the pass program is not built for multi-buffer XDP, and such
        # a lab sends from the kernel's stack.
        if self.mtu <= STANDARD_MTU and takes_redirects_only_with_a_program(self.peer):
            attach_pass_program(self.peer)
            self._peer_program = True

    def teardown(self) -> None:
        if netns.exists(self.dut.netns):
            _promiscuous(self.dut, False)
        if self._peer_program and netns.exists(self.peer.netns):
            subprocess.run(["ip", "-n", self.peer.netns, "link", "set", "dev", self.peer.ifname,
                            "xdp", "off"], capture_output=True)
        move_home((self.dut, self.peer))
        for name, mtu in self._home_mtu.items():
            _set_mtu(name, mtu)
        super().teardown()
