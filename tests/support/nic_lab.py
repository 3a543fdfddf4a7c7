# SPDX-License-Identifier: Apache-2.0
"""Labs on real NICs: the VM rig's virtio-net pairs (vagrant/vm/run.sh
--nic-pairs), moved into namespaces of their own in place of a veth pair.

    [netns <tag>-peer]  NIC 52:54:00:7a:0P:02 ~~ qemu hub P ~~ NIC 52:54:00:7a:0P:01  [netns <tag>-dut]

The NICs keep their names and MACs; addresses, static neighbours and the
silent peer are the veth lab's (pyxdp.lab.veth_lab.Lab). On leaving, each
NIC goes back to the namespace it came from, under its own name, before the
namespaces go: a NIC left to the kernel's namespace clean-up comes back
later, asynchronously, and the next lab would not find it.

virtio_net gives zero-copy AF_XDP where the device has a DMA device (qemu's
iommu_platform=on) from Linux 6.13. Its zero-copy receive code came in
6.11, but the driver says it has zero-copy (NETDEV_XDP_ACT_XSK_ZEROCOPY)
only since transmit came too, in 6.13: on Debian 13's 6.12 a zero-copy bind
is refused and both directions run in copy mode (measured in the VM rig).
"""

import os
import subprocess

import pytest

from pyxdp.kernel import netns, release
from pyxdp.lab.routed_lab import Path, RoutedLab
from pyxdp.lab.veth_lab import Endpoint, Lab, LabEnd

MAC_PREFIX = "52:54:00:7a:0"
ZEROCOPY_SINCE = (6, 13)


def mac(pair: int, end: int) -> str:
    return f"{MAC_PREFIX}{pair}:0{end}"


def find(address: str) -> str | None:
    """The name of this namespace's interface with MAC ADDRESS, if any."""
    for name in os.listdir("/sys/class/net"):
        try:
            with open(f"/sys/class/net/{name}/address") as f:
                if f.read().strip() == address:
                    return name
        except OSError:
            continue
    return None


def pairs() -> int:
    """How many of the rig's NIC pairs this machine has (both ends present)."""
    if os.geteuid() != 0 or not os.path.isdir("/sys/class/net"):
        return 0
    os.system("modprobe -q virtio_net")  # zl-init loads only what every boot needs
    count = 0
    while find(mac(count, 1)) and find(mac(count, 2)):
        count += 1
    return count


def require(wanted: int = 1) -> None:
    """Skip unless this machine has WANTED NIC pairs: the VM rig's, booted
    with run.sh --nic-pairs (conformance.sh --nic does)."""
    have = pairs()
    if have < wanted:
        pytest.skip(f"needs {wanted} virtio-net NIC pair(s) of the VM rig (run.sh --nic-pairs "
                    f"{wanted}); this machine has {have}")


def _on_nic(end: LabEnd, pair: int, which: int) -> LabEnd:
    """END's namespace and addresses, on the NIC of PAIR's end WHICH."""
    address = mac(pair, which)
    name = find(address)
    if name is None:
        raise RuntimeError(f"no NIC with MAC {address}: booted with run.sh --nic-pairs?")
    return LabEnd(end.netns, name, address, end.ipv4, end.ipv6)


def _move(end: LabEnd, to_fd: int) -> None:
    """Move END's NIC, down, from the namespace it is in now into TO_FD's."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=end.ifname)
        if found:
            ipr.link("set", index=found[0], state="down")
            ipr.link("set", index=found[0], net_ns_fd=to_fd)


def _move_into(end: LabEnd) -> None:
    fd = os.open(netns.path(end.netns), os.O_RDONLY)
    try:
        _move(end, fd)
    finally:
        os.close(fd)


def _lossless_qdisc(end: LabEnd) -> None:
    """A plain FIFO on END's NIC, long enough for any test's burst. The
    default fq_codel drops packets that wait longer than its target (5 ms):
    under TCG a sender's packets sometimes do, and one went missing now and
    then, counted by no socket or device."""
    subprocess.run(["tc", "-n", end.netns, "qdisc", "replace", "dev", end.ifname, "root",
                    "pfifo", "limit", "10000"], check=True, capture_output=True)


def _move_home(ends) -> None:
    """Each of ENDS' NICs back into this namespace, under its own name."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        for end in ends:
            if netns.exists(end.netns):
                with netns.entered(end.netns):
                    _move(end, home)
    finally:
        os.close(home)


class NicLab(Lab):
    """The veth lab's shape on NIC pair PAIR: dut is end 1, peer end 2."""

    def __init__(self, pair: int = 0):
        super().__init__()
        self.dut = _on_nic(self.dut, pair, 1)
        self.peer = _on_nic(self.peer, pair, 2)

    def _build(self) -> None:
        self._make_namespaces()
        for end in (self.dut, self.peer):
            _move_into(end)
            self._configure(end)
        _lossless_qdisc(self.peer)
        # qemu's virtio-net drops frames tagged with a VLAN id the guest has
        # not registered (a VLAN interface would register it); promiscuous
        # mode turns that filter off, so tagged datagrams reach XDP.
        from pyroute2 import IPRoute

        with netns.entered(self.dut.netns), IPRoute() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname=self.dut.ifname)[0], flags=0x100,
                     mask=0x100)  # IFF_PROMISC

    def teardown(self) -> None:
        _move_home((self.dut, self.peer))
        super().teardown()


class NicRoutedLab(RoutedLab):
    """The routed lab on two NIC pairs: the sender and the router's way in
    on pair 0, the router's way out and the receiver on pair 1."""

    def __init__(self, **options):
        super().__init__(receiver_gro=False, **options)
        self.sender = _on_nic(self.sender, 0, 2)
        self.router_in = _on_nic(self.router_in, 0, 1)
        self.router_out = _on_nic(self.router_out, 1, 1)
        self.receiver = _on_nic(self.receiver, 1, 2)
        self.path = Path(self.sender, Endpoint(self.router_in.netns, self.router_in.ifname,
                                               self.router_in.mac, self.receiver.ipv4,
                                               self.receiver.ipv6))

    def _veth(self, a: LabEnd, b: LabEnd) -> None:
        """No veth to make: the pair's NICs move into A's and B's namespaces."""
        _move_into(a)
        _move_into(b)
        if a is self.sender:
            _lossless_qdisc(a)

    def teardown(self) -> None:
        _move_home((self.sender, self.router_in, self.router_out, self.receiver))
        super().teardown()


def zerocopy_expected() -> bool:
    """Whether this kernel's virtio_net binds AF_XDP in zero-copy mode."""
    return release.at_least(*ZEROCOPY_SINCE)
