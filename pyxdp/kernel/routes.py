# SPDX-License-Identifier: Apache-2.0
"""Where a datagram to an address goes, as the kernel would send it: the
route (egress interface, source address, gateway, MTU) and the next hop's
neighbour entry (its MAC), read with rtnetlink (pyroute2) inside a network
namespace. What `ip route get ADDR` and `ip neigh show` print.

A sender that builds its own Ethernet frames (AF_XDP) needs exactly this.
Neighbours are read, never resolved: a missing entry is reported with what
to do (the kernel makes one when it next sends there, e.g. a ping), so
nothing is sent that the user did not ask for.
"""

import errno
import ipaddress
import os
import socket
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns as netns_mod

ARPHRD_ETHER = 1
RTN_UNICAST, RTN_LOCAL, RTN_BROADCAST, RTN_MULTICAST = 1, 2, 3, 5
# Neighbour states (NUD_*) whose link-layer address cannot be used.
NUD_INCOMPLETE, NUD_FAILED = 0x01, 0x20
NUD_NAMES = {0x01: "incomplete", 0x02: "reachable", 0x04: "stale", 0x08: "delay",
             0x10: "probe", 0x20: "failed", 0x40: "noarp", 0x80: "permanent"}


@dataclass(frozen=True)
class Endpoint:
    address: str  # numeric, IPv6 without brackets
    port: int

    @property
    def version(self) -> int:
        return 6 if ":" in self.address else 4

    def __str__(self) -> str:
        return f"[{self.address}]:{self.port}" if self.version == 6 else \
            f"{self.address}:{self.port}"


def parse_endpoint(text: str, *, any_port: bool = False) -> Endpoint:
    """'198.18.0.1:9977' or '[fd00:7a1::1]:9977'. Numeric only: no resolver
    (a relay must not stall on one either). ANY_PORT: port 0 too, for a
    socket to bind to a port the kernel picks."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # an IPv6 address needs its brackets, or the port is ambiguous
    lowest = 0 if any_port else 1
    if not sep or not host or not port.isdigit() or not lowest <= int(port) < 65536:
        raise ZerolayerError(f"{text!r} is not ADDR:PORT (IPv6 as [ADDR]:PORT, "
                             f"port {lowest}-65535)")
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ZerolayerError(f"{host!r} is not a numeric IPv4 or IPv6 address") from None
    return Endpoint(str(addr), int(port))


@dataclass(frozen=True)
class NextHop:
    """How the kernel reaches DST: out of IFNAME, from SRC, through GATEWAY
    (None: DST is on the link), to the neighbour DST_MAC, with an MTU."""

    dst: str
    ifname: str
    ifindex: int
    src: str
    gateway: str | None
    src_mac: str
    dst_mac: str
    mtu: int  # the route's (a learned path MTU included), else the interface's
    neighbour_state: str  # "permanent", "reachable", "stale"...; "given" for a MAC passed in

    @property
    def version(self) -> int:
        return 6 if ":" in self.dst else 4

    @property
    def via(self) -> str:
        return self.gateway or self.dst

    def to_json(self) -> dict:
        return {"dst": self.dst, "interface": self.ifname, "src": self.src,
                "gateway": self.gateway, "src_mac": self.src_mac, "dst_mac": self.dst_mac,
                "mtu": self.mtu, "neighbour_state": self.neighbour_state}


def resolve(dst: str, ifname: str, netns: str | None = None,
            dst_mac: str | None = None) -> NextHop:
    """The next hop to DST (numeric), which must leave through IFNAME; the
    neighbour's MAC is DST_MAC if given, else the kernel's entry."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    version = ipaddress.ip_address(dst).version
    where = f" in netns {netns}" if netns else ""
    with netns_mod.entered(netns), IPRoute() as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise ZerolayerError(f"no interface named {ifname!r}{where} (see `ip link show`)")
        link = ipr.get_links(found[0])[0]
        if link["ifi_type"] != ARPHRD_ETHER:
            raise ZerolayerError(f"{ifname} is not an Ethernet interface: AF_XDP sending "
                                 "builds Ethernet frames")
        try:
            route = ipr.route("get", dst=dst)[0]
        except NetlinkError as exc:
            why = "no route" if exc.code in (errno.ENETUNREACH, errno.EHOSTUNREACH) \
                else f"the route lookup failed ({os.strerror(exc.code)})"
            raise ZerolayerError(f"{why} to {dst}{where} (see `ip route get {dst}`)") from None
        kind = route["type"]
        if kind == RTN_LOCAL:
            raise ZerolayerError(f"{dst} is an address of this host{where}, not one out of "
                                 f"{ifname}")
        if kind in (RTN_BROADCAST, RTN_MULTICAST):
            raise ZerolayerError(f"{dst} is a broadcast or multicast address: only unicast "
                                 "destinations can be sent to")
        if kind != RTN_UNICAST:
            raise ZerolayerError(f"the route to {dst}{where} does not forward (route type "
                                 f"{kind}; see `ip route get {dst}`)")
        oif = route.get_attr("RTA_OIF")
        if oif != link["index"]:
            out = ipr.get_links(oif)[0].get_attr("IFLA_IFNAME") if oif else "nowhere"
            raise ZerolayerError(f"{dst} is routed out of {out}, not {ifname}{where} "
                                 f"(see `ip route get {dst}`)")
        gateway = route.get_attr("RTA_GATEWAY")
        src = route.get_attr("RTA_PREFSRC") or _first_address(ipr, oif, version)
        if src is None:
            raise ZerolayerError(f"{ifname} has no IPv{version} address to send from")
        mtu = _route_mtu(route) or link.get_attr("IFLA_MTU")
        hop = gateway or dst
        if dst_mac is not None:
            mac, state = dst_mac.lower(), "given"
        else:
            mac, state = _neighbour(ipr, oif, hop, ifname)
    return NextHop(dst, ifname, oif, src, gateway, link.get_attr("IFLA_ADDRESS"), mac, mtu,
                   state)


def _route_mtu(route) -> int | None:
    metrics = route.get_attr("RTA_METRICS")
    return metrics.get_attr("RTAX_MTU") if metrics is not None else None


def _first_address(ipr, index: int, version: int) -> str | None:
    family = socket.AF_INET6 if version == 6 else socket.AF_INET
    addrs = [a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(index=index, family=family)]
    return addrs[0] if addrs else None


def neighbour(hop: str, ifname: str, netns: str | None = None) -> str:
    """The MAC of neighbour HOP on IFNAME, from the kernel's entry."""
    from pyroute2 import IPRoute

    with netns_mod.entered(netns), IPRoute() as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise ZerolayerError(f"no interface named {ifname!r} (see `ip link show`)")
        return _neighbour(ipr, found[0], hop, ifname)[0]


def _neighbour(ipr, index: int, hop: str, ifname: str) -> tuple[str, str]:
    for entry in ipr.get_neighbours(ifindex=index, dst=hop):
        state, mac = entry["state"], entry.get_attr("NDA_LLADDR")
        if mac and not state & (NUD_INCOMPLETE | NUD_FAILED):
            return mac, NUD_NAMES.get(state, f"0x{state:x}")
    raise ZerolayerError(
        f"no usable neighbour entry for {hop} on {ifname} (see `ip neigh show dev {ifname}`): "
        f"ping {hop} once so the kernel resolves it, add one with `ip neigh add {hop} lladdr "
        f"MAC dev {ifname}`, or pass its MAC (--dst-mac)")
