# SPDX-License-Identifier: Apache-2.0
"""XDP attachment through rtnetlink (pyroute2): query, attach, replace, detach.

Why netlink, not a loader's attach call: XDP_FLAGS_REPLACE. With
IFLA_XDP_EXPECTED_FD the kernel swaps programs only if the one attached is the
one we name, in one step, so an upgrade never leaves the interface without a
program and never clobbers a program someone else attached meanwhile.
"""

import errno
import os
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import ethtool
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.off_loop import off_event_loop

XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
XDP_FLAGS_REPLACE = 1 << 4

MODE_FLAGS = {"native": XDP_FLAGS_DRV_MODE, "skb": XDP_FLAGS_SKB_MODE}
# IFLA_XDP_ATTACHED, as pyroute2 names its values (iproute2's words)
ATTACHED_MODES = {
    None: None,
    "xdp": "native",
    "xdpgeneric": "skb",
    "xdpoffload": "hw",
    "xdpmulti": "multi",
}


@dataclass(frozen=True)
class XdpState:
    ifindex: int
    ifname: str
    mode: str | None  # None: no program
    prog_id: int | None
    rx_queues: int  # in use (ethtool's channels), not merely allocated
    mtu: int


@dataclass(frozen=True)
class VethPeer:
    ifname: str | None  # None: in a namespace that has no name here
    netns: str | None  # None: the namespace the caller runs in (or has no name)
    xdp: bool  # an XDP program runs on it


def _ipr():
    from pyroute2 import IPRoute

    return IPRoute(ext_ack=True)


def _state(msg) -> XdpState:
    """Called inside the interface's netns (the queue count asks its driver)."""
    xdp = msg.get_attr("IFLA_XDP")
    mode, prog_id = None, None
    if xdp is not None:
        mode = ATTACHED_MODES.get(xdp.get_attr("IFLA_XDP_ATTACHED"), "unknown")
        prog_id = xdp.get_attr("IFLA_XDP_PROG_ID")
        if mode == "multi":  # more than one mode at once: report the driver's
            prog_id = xdp.get_attr("IFLA_XDP_DRV_PROG_ID") or xdp.get_attr(
                "IFLA_XDP_SKB_PROG_ID"
            )
    return XdpState(
        ifindex=msg["index"],
        ifname=msg.get_attr("IFLA_IFNAME"),
        mode=mode,
        prog_id=prog_id or None,
        rx_queues=ethtool.rx_queues_in_use(msg.get_attr("IFLA_IFNAME"),
                                           msg.get_attr("IFLA_NUM_RX_QUEUES") or 1),
        mtu=msg.get_attr("IFLA_MTU") or 0,
    )


@off_event_loop
def query(ifname: str, netns: str | None = None) -> XdpState:
    """The XDP state of IFNAME; ZerolayerError if there is no such interface."""
    with netns_mod.entered(netns), _ipr() as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            where = f" in netns {netns}" if netns else ""
            raise ZerolayerError(
                f"no interface named {ifname!r}{where} (see `ip link show`)"
            )
        return _state(ipr.get_links(found[0])[0])


@off_event_loop
def query_all(netns: str | None = None) -> list[XdpState]:
    with netns_mod.entered(netns), _ipr() as ipr:
        return sorted((_state(m) for m in ipr.get_links()), key=lambda s: s.ifindex)


@off_event_loop
def veth_peers(ifnames: list[str], netns: str | None = None) -> dict[str, VethPeer]:
    """The other end of each veth among IFNAMES (in NETNS); the interfaces
    that are no veth are left out. A peer in another namespace is found
    among the named ones (/run/netns) and PID 1's, by the id the kernel
    gives it: one dump of links per namespace, however many veths."""
    ends: dict[str, tuple[int, int | None]] = {}  # name -> (peer ifindex, peer nsid)
    with netns_mod.entered(netns), _ipr() as ipr:
        for link in ipr.get_links():
            info = link.get_attr("IFLA_LINKINFO")
            name = link.get_attr("IFLA_IFNAME")
            if name in ifnames and info is not None and info.get_attr("IFLA_INFO_KIND") == "veth":
                ends[name] = (link.get_attr("IFLA_LINK"), link.get_attr("IFLA_LINK_NETNSID"))
        nsids = _netns_by_id(ipr) if any(nsid is not None for _, nsid in ends.values()) else {}
    out: dict[str, VethPeer] = {}
    for where in {nsid for _, nsid in ends.values()}:
        names = [n for n, (_, nsid) in ends.items() if nsid == where]
        if where is not None and where not in nsids:
            out.update((n, VethPeer(None, None, False)) for n in names)
            continue
        peer_ns = netns if where is None else nsids[where]
        with netns_mod.entered(peer_ns), _ipr() as ipr:
            links = {link["index"]: link for link in ipr.get_links()}
        for n in names:
            peer = links.get(ends[n][0])
            if peer is None:
                out[n] = VethPeer(None, None, False)
                continue
            xdp = peer.get_attr("IFLA_XDP")
            out[n] = VethPeer(peer.get_attr("IFLA_IFNAME"), peer_ns,
                              xdp is not None and bool(xdp.get_attr("IFLA_XDP_PROG_ID")))
    return out


def _netns_by_id(ipr) -> dict[int, str | None]:
    """The namespaces IPR's namespace has an id for, by that id: the named
    ones, and None for PID 1's."""
    candidates: list[tuple[str | None, str]] = [(None, "/proc/1/ns/net")]
    if os.path.isdir(netns_mod.NETNS_RUN_DIR):
        candidates += [(n, netns_mod.path(n)) for n in sorted(os.listdir(netns_mod.NETNS_RUN_DIR))]
    out: dict[int, str | None] = {}
    for name, path in candidates:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            got = ipr.get_netnsid(fd=fd)
        finally:
            os.close(fd)
        nsid = got.get("nsid") if got else None
        if nsid is not None and nsid >= 0:
            out.setdefault(nsid, name)
    return out


@off_event_loop
def _set_xdp(ifindex: int, attrs: list, netns: str | None) -> None:
    from pyroute2.netlink.exceptions import NetlinkError

    with netns_mod.entered(netns), _ipr() as ipr:
        try:
            ipr.link("set", index=ifindex, IFLA_XDP={"attrs": attrs})
        except NetlinkError as exc:
            raise OSError(exc.code, _reason(exc)) from None


def _reason(exc) -> str:
    """The kernel's extended ack if it sent one, else strerror."""
    text = str(exc.args[1]) if len(exc.args) > 1 else ""
    import os

    return text or os.strerror(exc.code)


def set_program(
    ifindex: int,
    prog_fd: int,
    mode: str,
    *,
    expected_fd: int | None = None,
    netns: str | None = None,
) -> None:
    """Attach PROG_FD in MODE. With EXPECTED_FD, atomically replace exactly
    that program; without it, fail if any program is attached.
    Raises OSError carrying the kernel's errno and message."""
    flags = MODE_FLAGS[mode]
    attrs = [("IFLA_XDP_FD", prog_fd)]
    if expected_fd is None:
        flags |= XDP_FLAGS_UPDATE_IF_NOEXIST
    else:
        flags |= XDP_FLAGS_REPLACE
        attrs.append(("IFLA_XDP_EXPECTED_FD", expected_fd))
    attrs.append(("IFLA_XDP_FLAGS", flags))
    _set_xdp(ifindex, attrs, netns)


def clear_program(ifindex: int, mode: str, expected_fd: int, netns: str | None = None) -> None:
    """Remove the program, only if it is still EXPECTED_FD's."""
    flags = MODE_FLAGS[mode] | XDP_FLAGS_REPLACE
    attrs = [("IFLA_XDP_FD", -1), ("IFLA_XDP_EXPECTED_FD", expected_fd), ("IFLA_XDP_FLAGS", flags)]
    _set_xdp(ifindex, attrs, netns)


NATIVE_UNSUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL, errno.ERANGE, errno.E2BIG)
