# SPDX-License-Identifier: Apache-2.0
"""A lab of two network namespaces joined by a veth pair.

    [netns <tag>-peer]  peer0 ==== dut0  [netns <tag>-dut]
      198.18.0.2, fd00:7a1::2         198.18.0.1, fd00:7a1::1

zerolayer attaches to dut0; traffic comes from the peer. Addresses are from
the benchmarking range (RFC 2544) and exist only inside these namespaces.
The peer's own stack is silent, so every packet dut0 sees was sent on
purpose and counters can be compared exactly: neighbours are static (no ARP,
no neighbour discovery) and IPv6 is off in the peer namespace (no MLD
reports). IPv6 traffic from the peer is crafted at layer 2.
Names carry the creating pid and a random tag, so runs never collide, and
leftovers of a killed run can be told from a live one and swept.
"""

import contextlib
import os
import re
import secrets
from dataclasses import dataclass
from typing import Self

from pyxdp.kernel import netns
from pyxdp.xdp import iface_lock, pins
from pyxdp.xsk import published

PREFIX = "zl-"
_NAME = re.compile(r"^zl-(\d+)-[0-9a-f]{6}-[a-z0-9]+$")


@dataclass(frozen=True)
class Endpoint:
    netns: str | None  # None: the namespace we run in
    ifname: str
    mac: str
    ipv4: str | None
    ipv6: str | None


@dataclass(frozen=True)
class LabEnd(Endpoint):
    """An end of a lab's veth pair: always in a namespace of the lab's own."""

    netns: str
    ipv4: str
    ipv6: str


def write_sysctl(key: str, value: str) -> None:
    """Write /proc/sys/KEY as seen from this thread's network namespace."""
    with open(f"/proc/sys/{key}", "w") as f:
        f.write(value)


def new_tag() -> str:
    return f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}"


def unique_netns_name(role: str) -> str:
    """A namespace name for this run (ROLE: lowercase letters and digits),
    which sweep_stale() removes once this process is gone."""
    return f"{new_tag()}-{role}"


class NamespaceLab:
    """A lab of namespaces made on entering a `with` block and removed on
    leaving it, whatever happened, half-built ones included."""

    def __enter__(self) -> Self:
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def _build(self) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        raise NotImplementedError


class Lab(NamespaceLab):
    """Use as a context manager: the namespaces, the veth pair and any pins
    under the dut namespace are removed on exit, whatever happened."""

    DUT_MAC = "02:7a:00:00:00:01"
    PEER_MAC = "02:7a:00:00:00:02"

    def __init__(self, rx_queues: int | None = 1, mtu: int = 1500):
        """RX_QUEUES: the queues each end allocates and runs; None leaves
        it to the kernel, as `ip link add ... type veth` does (a queue per
        possible CPU allocated, one running)."""
        self.tag = new_tag()
        self.rx_queues = rx_queues
        self.mtu = mtu
        self.dut = LabEnd(f"{self.tag}-dut", "dut0", self.DUT_MAC, "198.18.0.1", "fd00:7a1::1")
        self.peer = LabEnd(f"{self.tag}-peer", "peer0", self.PEER_MAC, "198.18.0.2", "fd00:7a1::2")

    def _make_namespaces(self) -> None:
        """The dut's and the peer's namespaces, the peer's with IPv6 off."""
        netns.create(self.dut.netns)
        netns.create(self.peer.netns)
        with netns.entered(self.peer.netns):
            for scope in ("all", "default"):
                write_sysctl(f"net/ipv6/conf/{scope}/disable_ipv6", "1")

    def _build(self) -> None:
        from pyroute2 import IPRoute

        self._make_namespaces()
        peer_fd = os.open(netns.path(self.peer.netns), os.O_RDONLY)
        try:
            queues = {} if self.rx_queues is None else {
                "num_rx_queues": self.rx_queues, "num_tx_queues": self.rx_queues}
            with netns.entered(self.dut.netns), IPRoute() as ipr:
                ipr.link(
                    "add", ifname=self.dut.ifname, kind="veth", address=self.dut.mac,
                    peer={"ifname": self.peer.ifname, "address": self.peer.mac,
                          "net_ns_fd": peer_fd, **queues},
                    **queues,
                )
        finally:
            os.close(peer_fd)
        for end in (self.dut, self.peer):
            self._configure(end)

    def _configure(self, end: LabEnd) -> None:
        from pyroute2 import IPRoute

        with netns.entered(end.netns), IPRoute() as ipr:
            lo = ipr.link_lookup(ifname="lo")[0]
            idx = ipr.link_lookup(ifname=end.ifname)[0]
            ipr.link("set", index=lo, state="up")
            ipr.link("set", index=idx, mtu=self.mtu)
            ipr.addr("add", index=idx, address=end.ipv4, prefixlen=24)
            other = self.peer if end is self.dut else self.dut
            ipr.neigh("add", dst=other.ipv4, lladdr=other.mac, ifindex=idx, state="permanent")
            if end is self.dut:
                # nodad: usable at once, not after duplicate address detection
                ipr.addr("add", index=idx, address=end.ipv6, prefixlen=64, flags=0x02)
                ipr.neigh("add", dst=other.ipv6, lladdr=other.mac, ifindex=idx, state="permanent")
            ipr.link("set", index=idx, state="up")

    def teardown(self) -> None:
        for end in (self.peer, self.dut):
            netns.remove(end.netns)
        pins.remove_netns_tree(self.dut.netns)
        iface_lock.remove_netns(self.dut.netns)
        published.remove_netns(self.dut.netns)  # a killed listener's stale files

    @contextlib.contextmanager
    def in_peer(self):
        with netns.entered(self.peer.netns):
            yield

    @contextlib.contextmanager
    def in_dut(self):
        with netns.entered(self.dut.netns):
            yield


def sweep_stale() -> list[str]:
    """Remove lab namespaces (and their pins, locks and published files) whose creating process
    is gone."""
    removed = []
    names = set(os.listdir(netns.NETNS_RUN_DIR)) if os.path.isdir(netns.NETNS_RUN_DIR) else set()
    names |= set(pins.pinned_netns()) | set(iface_lock.locked_netns()) | set(published.namespaces())
    for name in sorted(names):
        m = _NAME.match(name)
        if not m or os.path.exists(f"/proc/{m.group(1)}"):
            continue
        netns.remove(name)
        pins.remove_netns_tree(name)
        iface_lock.remove_netns(name)
        published.remove_netns(name)
        removed.append(name)
    return removed
