# SPDX-License-Identifier: Apache-2.0
"""The AF_XDP sockets bound to the interfaces zerolayer is attached to, and
the mode each really runs in, for `exporter` and `top`.

AF_XDP socket statistics live in the socket. From outside the process that
owns it the kernel shows them only through sock_diag (xsk_diag, kernel
option CONFIG_XDP_SOCKETS_DIAG). Where that is missing, the statistics
zerolayer's own listeners publish (pyxdp.xsk.published) stand in,
source "listener"; sockets of other programs are then not seen.
"""

import socket
import struct
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns as netns_mod
from pyxdp.xdp import flows
from pyxdp.xsk import published as xsk_published

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
AF_XDP = 44
XDP_SHOW_INFO, XDP_SHOW_RING_CFG, XDP_SHOW_UMEM, XDP_SHOW_STATS = 1, 2, 4, 16
XDP_DIAG_INFO, XDP_DIAG_RX_RING, XDP_DIAG_UMEM, XDP_DIAG_UMEM_FILL_RING, XDP_DIAG_STATS = 1, 3, 5, 6, 9
XDP_DU_F_ZEROCOPY = 1

NLMSGHDR = struct.Struct("=IHHII")
XDP_DIAG_REQ = struct.Struct("=BBHII2I")
XDP_DIAG_MSG = struct.Struct("=BBHI2I")
RTATTR = struct.Struct("=HH")
DIAG_INFO = struct.Struct("=II")
DIAG_RING = struct.Struct("=I")
DIAG_UMEM = struct.Struct("=QIIIIIIII")
DIAG_STATS = struct.Struct("=6Q")
# struct xdp_diag_stats, in the names getsockopt(XDP_STATISTICS) uses
XSK_STATS = ("rx_dropped", "rx_invalid_descs", "rx_ring_full",
             "rx_fill_ring_empty_descs", "tx_invalid_descs", "tx_ring_empty_descs")


@dataclass(frozen=True)
class XskSocketDiag:
    inode: int
    ifindex: int | None  # None: not bound
    queue: int | None
    zerocopy: bool | None  # None: no UMEM yet
    rx_ring: int | None
    fill_ring: int | None
    stats: dict[str, int]


def _align4(n: int) -> int:
    return (n + 3) & ~3


def parse_xdp_diag(msg: bytes) -> XskSocketDiag:
    """One xdp_diag_msg and its attributes (the payload after nlmsghdr)."""
    _, _, _, inode, _, _ = XDP_DIAG_MSG.unpack_from(msg)
    off = XDP_DIAG_MSG.size
    info = umem = None
    rx = fill = None
    stats = {}
    while off + RTATTR.size <= len(msg):
        length, kind = RTATTR.unpack_from(msg, off)
        if length < RTATTR.size:
            break
        body = msg[off + RTATTR.size:off + length]
        if kind == XDP_DIAG_INFO:
            info = DIAG_INFO.unpack_from(body)
        elif kind == XDP_DIAG_RX_RING:
            rx = DIAG_RING.unpack_from(body)[0]
        elif kind == XDP_DIAG_UMEM_FILL_RING:
            fill = DIAG_RING.unpack_from(body)[0]
        elif kind == XDP_DIAG_UMEM:
            umem = DIAG_UMEM.unpack_from(body)
        elif kind == XDP_DIAG_STATS:
            stats = dict(zip(XSK_STATS, DIAG_STATS.unpack_from(body)))
        off += _align4(length)
    return XskSocketDiag(
        inode=inode,
        ifindex=info[0] if info else None,
        queue=info[1] if info else None,
        zerocopy=bool(umem[7] & XDP_DU_F_ZEROCOPY) if umem else None,  # flags
        rx_ring=rx, fill_ring=fill, stats=stats,
    )


def _dump_request() -> bytes:
    req = XDP_DIAG_REQ.pack(AF_XDP, 0, 0, 0,
                            XDP_SHOW_INFO | XDP_SHOW_RING_CFG | XDP_SHOW_UMEM | XDP_SHOW_STATS, 0, 0)
    return NLMSGHDR.pack(NLMSGHDR.size + len(req), SOCK_DIAG_BY_FAMILY,
                         NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + req


def parse_dump(data: bytes) -> tuple[list[XskSocketDiag], bool, int]:
    """Messages of one recv(): (sockets, done, errno of an NLMSG_ERROR)."""
    found: list[XskSocketDiag] = []
    off = 0
    while off + NLMSGHDR.size <= len(data):
        length, kind, _, _, _ = NLMSGHDR.unpack_from(data, off)
        if length < NLMSGHDR.size:
            break
        body = data[off + NLMSGHDR.size:off + length]
        if kind == NLMSG_DONE:
            return found, True, 0
        if kind == NLMSG_ERROR:
            return found, True, -struct.unpack_from("=i", body)[0]
        if kind == SOCK_DIAG_BY_FAMILY:
            found.append(parse_xdp_diag(body))
        off += _align4(length)
    return found, False, 0


def xsk_sockets(netns: str | None = None) -> list[XskSocketDiag] | None:
    """The AF_XDP sockets of NETNS, or None when the kernel has no xsk_diag."""
    with netns_mod.entered(netns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    with sock:
        sock.settimeout(2.0)
        sock.sendto(_dump_request(), (0, 0))
        found = []
        while True:
            batch, done, err = parse_dump(sock.recv(65536))
            found += batch
            if err:  # ENOENT: no handler for AF_XDP in this kernel
                return None
            if done:
                return found


# --- bound to zerolayer's interfaces ---------------------------------------------

@dataclass(frozen=True)
class BoundSocket:
    interface: str
    netns: str | None
    queue: int | None
    inode: int
    mode: str  # zerocopy, copy, or unknown (no UMEM yet)
    rx_ring: int | None  # None: not known (published by a listener)
    fill_ring: int | None
    source: str  # sock_diag (the kernel) or listener (published by zerolayer)
    stats: dict[str, int]

    def to_json(self) -> dict:
        return {"queue": self.queue, "mode": self.mode, "source": self.source}


@dataclass
class Found:
    sockets: list[BoundSocket]
    diag_available: dict[str, bool]  # per netns ("" outside one)
    notes: list[str]


def bound(observed: list[flows.Observation]) -> Found:
    """The AF_XDP sockets bound to the OBSERVED interfaces."""
    found = Found([], {}, [])
    by_netns: dict[str | None, list[flows.Observation]] = {}
    for o in observed:
        by_netns.setdefault(o.netns, []).append(o)
    for ns, here in by_netns.items():
        try:
            sockets = xsk_sockets(ns)
        except (OSError, ZerolayerError) as exc:
            found.notes.append(f"sock_diag in netns {ns or '(host)'} failed: {exc}")
            sockets = None
        found.diag_available[ns or ""] = sockets is not None
        if sockets is None:
            found.notes.append("this kernel does not report AF_XDP sockets through sock_diag "
                               "(CONFIG_XDP_SOCKETS_DIAG): showing what zerolayer listeners "
                               "publish")
            names = {o.interface for o in here}
            found.sockets += [
                BoundSocket(p.interface, ns, p.queue, p.inode, p.mode or "unknown", None, None,
                            "listener", dict(p.statistics))
                for p in xsk_published.read(ns) if p.interface in names]
            continue
        by_index = {o.ifindex: o.interface for o in here}
        found.sockets += [
            BoundSocket(by_index[s.ifindex], ns, s.queue, s.inode,
                        "unknown" if s.zerocopy is None else
                        ("zerocopy" if s.zerocopy else "copy"),
                        s.rx_ring, s.fill_ring, "sock_diag", s.stats)
            for s in sockets if s.ifindex in by_index]
    return found
