# SPDX-License-Identifier: Apache-2.0
"""Labs on real NICs: the VM rig's virtio-net pairs (vagrant/vm/run.sh
--nic-pairs), found by their MACs and moved into namespaces of their own
(pyxdp.lab.pair_lab) in place of a veth pair.

    [netns <tag>-peer]  NIC 52:54:00:7a:0P:02 ~~ qemu hub P ~~ NIC 52:54:00:7a:0P:01  [netns <tag>-dut]

virtio_net gives zero-copy AF_XDP where the device has a DMA device (qemu's
iommu_platform=on) from Linux 6.13. Its zero-copy receive code came in
6.11, but the driver says it has zero-copy (NETDEV_XDP_ACT_XSK_ZEROCOPY)
only since transmit came too, in 6.13: on Debian 13's 6.12 a zero-copy bind
is refused and both directions run in copy mode (measured in the VM rig).
"""

import os

import pytest

from pyxdp.kernel import release
from pyxdp.lab import pair_lab
from pyxdp.lab.routed_lab import Path, RoutedLab
from pyxdp.lab.veth_lab import Endpoint, LabEnd

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
    return pair_lab.on_interface(end, name)


class NicLab(pair_lab.PairLab):
    """The veth lab's shape on NIC pair PAIR at MTU: dut is end 1, peer end 2."""

    def __init__(self, pair: int = 0, mtu: int = 1500):
        dut, peer = find(mac(pair, 1)), find(mac(pair, 2))
        if dut is None or peer is None:
            raise RuntimeError(f"NIC pair {pair} is missing: booted with run.sh --nic-pairs?")
        super().__init__(dut, peer, mtu)


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
        pair_lab.move_into(a)
        pair_lab.move_into(b)
        if a is self.sender:
            pair_lab.lossless_qdisc(a)

    def teardown(self) -> None:
        pair_lab.move_home((self.sender, self.router_in, self.router_out, self.receiver))
        super().teardown()


def zerocopy_expected() -> bool:
    """Whether this kernel's virtio_net binds AF_XDP in zero-copy mode."""
    return release.at_least(*ZEROCOPY_SINCE)
