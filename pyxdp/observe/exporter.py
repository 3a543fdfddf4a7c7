# SPDX-License-Identifier: Apache-2.0
"""`zerolayer exporter`: Prometheus metrics for every interface zerolayer
has pins for, read at each scrape from the pinned maps (no compile, no
state of its own).

Per interface (labels interface, netns; netns is "" outside a namespace):
the XDP counters, the token gap histogram of all its flows, the size of its
flow table, and its AF_XDP sockets.
Per-flow series are left out on purpose: a flow is keyed by source port, so
they would grow without bound; `zerolayer stats --flows` and `zerolayer top`
show flows.

AF_XDP socket statistics live in the socket. From outside the process that
owns it the kernel shows them only through sock_diag (xsk_diag, kernel
option CONFIG_XDP_SOCKETS_DIAG). Where that is missing
(zerolayer_xsk_diag_available 0), the statistics zerolayer's own listeners
publish (pyxdp.xsk.published) are exported instead, with source="listener";
sockets of other programs are then not seen.
"""

import os
import socket
import struct
import threading
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.signals import stop_on_signals
from pyxdp.proto import counters
from pyxdp.xdp import flows, pins
from pyxdp.xsk import published as xsk_published

DEFAULT_LISTEN = "127.0.0.1:9435"


# --- AF_XDP sockets through sock_diag -------------------------------------------

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


# --- the metrics -------------------------------------------------------------------

class ZerolayerCollector:
    """A prometheus_client collector: every scrape reads the pinned tree."""

    IFACE = ["interface", "netns"]

    def __init__(self, log=None, only_netns: str | None = None):
        self._log = log
        self._only_netns = only_netns  # None: the host and every namespace
        self._logged: set[str] = set()

    def _note(self, line: str) -> None:
        """Log each distinct problem once, not at every scrape."""
        if self._log and line not in self._logged:
            self._logged.add(line)
            self._log(line)

    def collect(self):
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        seen, errors = flows.observe_all(self._only_netns)
        for line in errors:
            self._note(f"skipped {line}")

        def counter(name, doc, extra=()):
            return CounterMetricFamily(f"zerolayer_{name}", doc, labels=self.IFACE + list(extra))

        def gauge(name, doc, extra=()):
            return GaugeMetricFamily(f"zerolayer_{name}", doc, labels=self.IFACE + list(extra))

        attached = gauge("attached", "1 when zerolayer's XDP program runs on the interface, "
                                     "0 when only its pins are left")
        info = gauge("xdp_info", "The XDP program in effect (value 1): its mode and parser "
                                 "(full, or direct on kernels without bpf_xdp_load_bytes)",
                     ["mode", "program_id", "parser"])
        plain = {
            "packets": counter("packets", "Packets the XDP program saw"),
            "other": counter("other_packets", "Packets that are not token traffic, passed untouched"),
            "fragments": counter("fragments", "IP fragments, passed unparsed"),
            "beyond_window": counter("beyond_window", "Token-port datagrams passed unjudged: a "
                                     "frame header lies past what the direct parser can read"),
            "token_datagrams": counter("token_datagrams", "UDP datagrams whose every frame is valid"),
            "payload_bytes": counter("payload_bytes", "Frame payload bytes in token datagrams"),
            "redirected": counter("redirected", "Token datagrams redirected to an AF_XDP socket"),
            "fallback_passed": counter("fallback_passed",
                                       "Token datagrams passed to the kernel: no AF_XDP socket on their queue"),
            "malformed_dropped": counter("malformed_dropped", "Malformed datagrams dropped"),
            "malformed_passed": counter("malformed_passed", "Malformed datagrams passed (policy pass)"),
            "forwarded": counter("forwarded", "Token datagrams routed out of an egress interface "
                                              "by XDP forwarding"),
        }
        frames = counter("frames", "Frames in token datagrams, by type", ["type"])
        malformed = counter("malformed", "Malformed datagrams, by the first reason met", ["reason"])
        not_forwarded = counter("not_forwarded", "Token datagrams XDP forwarding left to the "
                                                 "normal verdict, by reason", ["reason"])
        gaps = HistogramMetricFamily(
            "zerolayer_token_gap_seconds",
            "Time between consecutive TOKEN frames of a flow, all flows of the interface "
            "(tokens sharing a datagram: 0; REQUEST and DONE reset the clock)",
            labels=self.IFACE)
        tracking = gauge("flow_tracking_enabled", "1 when per-flow tracking is on")
        nflows = gauge("flows", "Flows in the flow table")
        capacity = gauge("flows_capacity", "Size of the flow table; beyond it the least "
                                           "recently used flow is evicted")

        for o in seen:
            lab = [o.interface, o.netns or ""]  # IFACE
            attached.add_metric(lab, 1 if o.attached else 0)
            if o.attached:
                info.add_metric(lab + [o.mode or "", str(o.program_id), o.parser or ""], 1)
            for key, fam in plain.items():
                fam.add_metric(lab, o.counters[key])
            for label in counters.FRAME_LABELS:
                frames.add_metric(lab + [label], o.counters[f"frames.{label}"])
            for reason in counters.REASONS:
                malformed.add_metric(lab + [reason], o.counters[f"malformed.{reason}"])
            for reason in counters.FORWARD_REASONS:
                not_forwarded.add_metric(lab + [reason], o.counters[f"forward.{reason}"])
            gaps.add_metric(lab, _cumulative_buckets(o.gap_hist), o.gap_sum_ns / 1e9)
            tracking.add_metric(lab, 1 if o.flow_tracking else 0)
            nflows.add_metric(lab, len(o.flows))
            capacity.add_metric(lab, o.flows_capacity)

        yield from (attached, info, *plain.values(), frames, malformed, not_forwarded, gaps, tracking,
                    nflows, capacity)
        yield from self._xsk_families(seen)
        yield GaugeMetricFamily("zerolayer_exporter_skipped_interfaces",
                                "Pin dirs that could not be read at this scrape", value=len(errors))

    def _xsk_families(self, seen: list[flows.Observation]):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        sock_labels = self.IFACE + ["queue", "inode"]
        available = GaugeMetricFamily(
            "zerolayer_xsk_diag_available",
            "1 when the kernel reports AF_XDP sockets through sock_diag (xsk_diag)",
            labels=["netns"])
        info = GaugeMetricFamily("zerolayer_xsk_info",
                                 "An AF_XDP socket bound to the interface (value 1); source: "
                                 "sock_diag (the kernel) or listener (published by zerolayer)",
                                 labels=sock_labels + ["zerocopy", "rx_ring", "fill_ring",
                                                       "source"])
        stats = {name: CounterMetricFamily(f"zerolayer_xsk_{name}",
                                           f"AF_XDP socket statistic {name} (as XDP_STATISTICS)",
                                           labels=sock_labels)
                 for name in XSK_STATS}
        by_netns: dict[str | None, list[flows.Observation]] = {}
        for o in seen:
            by_netns.setdefault(o.netns, []).append(o)
        for ns, observed in by_netns.items():
            try:
                sockets = xsk_sockets(ns)
            except (OSError, ZerolayerError) as exc:
                self._note(f"sock_diag in netns {ns or '(host)'} failed: {exc}")
                sockets = None
            available.add_metric([ns or ""], 0 if sockets is None else 1)
            if sockets is None:
                self._note("this kernel does not report AF_XDP sockets through sock_diag "
                           "(CONFIG_XDP_SOCKETS_DIAG): exporting what zerolayer listeners publish")
                names = {o.interface for o in observed}
                for p in xsk_published.read(ns):
                    if p.interface not in names:
                        continue
                    lab = [p.interface, ns or "", str(p.queue), str(p.inode)]
                    info.add_metric(lab + [str(p.mode == "zerocopy").lower(), "", "", "listener"], 1)
                    for name in XSK_STATS:
                        stats[name].add_metric(lab, p.statistics.get(name, 0))
                continue
            by_index = {o.ifindex: o.interface for o in observed}
            for s in sockets:
                if s.ifindex not in by_index:
                    continue
                lab = [by_index[s.ifindex], ns or "", str(s.queue), str(s.inode)]
                mode = "unknown" if s.zerocopy is None else str(s.zerocopy).lower()
                info.add_metric(lab + [mode, str(s.rx_ring or 0), str(s.fill_ring or 0),
                                       "sock_diag"], 1)
                for name, value in s.stats.items():
                    stats[name].add_metric(lab, value)
        yield available
        yield info
        yield from stats.values()


def _cumulative_buckets(hist: list[int]) -> list[tuple[str, int]]:
    """Our log2 buckets as Prometheus's cumulative le buckets, in seconds."""
    from prometheus_client.utils import floatToGoString

    out, total = [], 0
    for count, le_us in zip(hist, flows.BUCKET_LE_US):
        total += count
        out.append((floatToGoString(le_us / 1e6) if le_us is not None else "+Inf", total))
    return out


# --- serving ---------------------------------------------------------------------

def parse_listen(listen: str) -> tuple[str, int]:
    """HOST:PORT, or [IPV6]:PORT."""
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    # Port 0: the kernel picks a free one, which the start-up line names.
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ZerolayerError(f"--listen {listen!r}: use HOST:PORT, e.g. {DEFAULT_LISTEN} or [::1]:9435")
    return host, int(port)


def registry(log=None, only_netns: str | None = None):
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(ZerolayerCollector(log, only_netns))
    return reg


def render(log=None, only_netns: str | None = None) -> bytes:
    """The metrics, once, in the text exposition format."""
    from prometheus_client import generate_latest

    return generate_latest(registry(log, only_netns))


class Exporter:
    """An HTTP server for /metrics on HOST:PORT, in a background thread."""

    def __init__(self, listen: str = DEFAULT_LISTEN, log=None, only_netns: str | None = None):
        from prometheus_client import start_http_server

        host, port = parse_listen(listen)
        try:
            self._server, self._thread = start_http_server(
                port, addr=host, registry=registry(log, only_netns))
        except OSError as exc:
            raise ZerolayerError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
        self.address: tuple[str, int] = self._server.server_address[:2]  # type: ignore[assignment]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(listen: str = DEFAULT_LISTEN, log=print, stop: threading.Event | None = None,
          only_netns: str | None = None, announce=None) -> None:
    """Serve until STOP is set (SIGINT and SIGTERM set it). ANNOUNCE, if
    given, is called once serving has started, with what is served where
    (`exporter --json` prints it)."""
    exporter = Exporter(listen, log, only_netns)
    try:
        with stop_on_signals(stop) as stop:
            host, port = exporter.address[:2]
            shown = f"[{host}]" if ":" in host else host
            url = f"http://{shown}:{port}/metrics"
            what = f"netns {only_netns}'s interfaces" if only_netns else "every interface"
            if announce is not None:
                announce({"url": url, "address": host, "port": port, "netns": only_netns,
                          "pin_root": pins.ROOT, "pid": os.getpid()})
            log(f"serving {url} for {what} under {pins.ROOT} (pid {os.getpid()}); "
                "Ctrl-C stops")
            while not stop.wait(3600):
                pass
    finally:
        exporter.close()
