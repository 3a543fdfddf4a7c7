# SPDX-License-Identifier: Apache-2.0
"""`zerolayer exporter`: Prometheus metrics for every interface zerolayer
has pins for, read at each scrape from the pinned maps (no compile, no
state of its own).

Per interface (labels interface, netns; netns is "" outside a namespace):
the XDP counters (each as its row of pyxdp.proto.counters says), the token
gap histogram of all its flows, the size of its flow table, and its AF_XDP
sockets.
Per-flow series are left out on purpose: a flow is keyed by source port, so
they would grow without bound; `zerolayer stats --flows` and `zerolayer top`
show flows.

AF_XDP sockets are found by pyxdp.observe.xsk_sockets (sock_diag where the
kernel has xsk_diag, zerolayer_xsk_diag_available 1; else what zerolayer's
own listeners publish, source="listener").

With streams (`--streams`, `[streams]`), the token streams of every process
too (docs/spec.md §11.5): an observer (pyxdp.streams) runs in a thread
beside the server and feeds the histograms as chunks pass.
"""

import os
import threading

from pyxdp.errors import ZerolayerError
from pyxdp.kernel.signals import stop_on_signals
from pyxdp.observe import xsk_sockets
from pyxdp.proto import counters
from pyxdp.xdp import flows, pins

DEFAULT_LISTEN = "127.0.0.1:9435"


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
        from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

        seen, errors = flows.observe_all(self._only_netns)
        for line in errors:
            self._note(f"skipped {line}")

        def gauge(name, doc, extra=()):
            return GaugeMetricFamily(f"zerolayer_{name}", doc, labels=self.IFACE + list(extra))

        attached = gauge("attached", "1 when zerolayer's XDP program runs on the interface, "
                                     "0 when only its pins are left")
        info = gauge("xdp_info", "The XDP program in effect (value 1): its mode and parser "
                                 "(full, or direct on kernels without bpf_xdp_load_bytes)",
                     ["mode", "program_id", "parser"])
        # The XDP counters, from their table: the plain ones, then those by reason.
        table = sorted(counters.COUNTERS, key=lambda c: bool(c.by))
        families = {c.name: counters.family(c, tuple(self.IFACE)) for c in table}
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
            for c in table:
                for reason in c.reasons:
                    families[c.name].add_metric(lab + [reason], o.counters[f"{c.name}.{reason}"])
                if not c.by:
                    families[c.name].add_metric(lab, o.counters[c.name])
            gaps.add_metric(lab, _cumulative_buckets(o.gap_hist), o.gap_sum_ns / 1e9)
            tracking.add_metric(lab, 1 if o.flow_tracking else 0)
            nflows.add_metric(lab, len(o.flows))
            capacity.add_metric(lab, o.flows_capacity)

        yield from (attached, info, *families.values(), gaps, tracking, nflows, capacity)
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
                 for name in xsk_sockets.XSK_STATS}
        found = xsk_sockets.bound(seen)
        for line in found.notes:
            self._note(line)
        for ns, yes in found.diag_available.items():
            available.add_metric([ns], int(yes))
        for s in found.sockets:
            lab = [s.interface, s.netns or "", str(s.queue), str(s.inode)]
            zerocopy = "unknown" if s.mode == "unknown" else str(s.mode == "zerocopy").lower()
            ring = "" if s.source == "listener" else str(s.rx_ring or 0)
            fill = "" if s.source == "listener" else str(s.fill_ring or 0)
            info.add_metric(lab + [zerocopy, ring, fill, s.source], 1)
            for name in xsk_sockets.XSK_STATS:
                stats[name].add_metric(lab, s.stats.get(name, 0))
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


def registry(log=None, only_netns: str | None = None, extra=()):
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(ZerolayerCollector(log, only_netns))
    for collector in extra:
        reg.register(collector)
    return reg


def render(log=None, only_netns: str | None = None) -> bytes:
    """The metrics, once, in the text exposition format."""
    from prometheus_client import generate_latest

    return generate_latest(registry(log, only_netns))


class Exporter:
    """An HTTP server for /metrics on HOST:PORT, in a background thread."""

    def __init__(self, listen: str = DEFAULT_LISTEN, log=None, only_netns: str | None = None,
                 extra=()):
        from prometheus_client import start_http_server

        host, port = parse_listen(listen)
        try:
            self._server, self._thread = start_http_server(
                port, addr=host, registry=registry(log, only_netns, extra))
        except OSError as exc:
            raise ZerolayerError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
        self.address: tuple[str, int] = self._server.server_address[:2]  # type: ignore[assignment]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(listen: str = DEFAULT_LISTEN, log=print, stop: threading.Event | None = None,
          only_netns: str | None = None, announce=None, streams=None) -> None:
    """Serve until STOP is set (SIGINT and SIGTERM set it). ANNOUNCE, if
    given, is called once serving has started, with what is served where
    (`exporter --json` prints it). STREAMS (a service.config.Streams or
    alike, enabled) adds the token streams' metrics."""
    observer = None
    if streams is not None:
        from pyxdp.streams.observer_thread import (
            ObserverThread,  # loads the observer: only with --streams
        )

        observer = ObserverThread(streams, log)
    try:
        exporter = Exporter(listen, log, only_netns,
                            extra=observer.collectors() if observer else ())
    except BaseException:
        if observer:
            observer.close()
        raise
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
        if observer:
            observer.close()
