# SPDX-License-Identifier: Apache-2.0
"""The streams' metrics pushed over OTLP/HTTP with protobuf (docs/spec.md
§11.5), through OpenTelemetry's own exporter: `exporter --streams --otlp`.

Every interval, a thread of its own takes a copy of the observer's series
(pyxdp.streams.metrics, already counted as chunks pass: nothing is added
to a chunk's path) and sends it. Client streams of a known API go under
OpenTelemetry's GenAI client names, the rest under zerolayer's own (a
chunk is not a token: no server-side GenAI name fits). Each identity
(pyxdp.streams.identity) is a resource of its own.

Faults never reach the observer: an export that fails (the receiver down,
slow, refusing, answering garbage) is counted by reason in
zerolayer_otlp_dropped_total and said once a minute, and the next export
carries its data (every series is kept whole; delta temporality counts
from the last export that got through). After a failure the wait grows
(doubling, up to eight intervals or MAX_BACKOFF_S). A response's body is read up to
RESPONSE_MAX bytes and within the export's timeout, whatever the receiver
sends. close() flushes once more, for at most FLUSH_S.
"""

import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass

from pyxdp import __version__, trusted_file
from pyxdp.errors import ZerolayerError
from pyxdp.proto.counters import Metric, family
from pyxdp.streams import metrics as stream_metrics
from pyxdp.streams.metrics import Key

RESPONSE_MAX = 64 * 1024
MAX_BACKOFF_S = 300.0
FLUSH_S = 1.0
SAY_EVERY_S = 60.0
TEMPORALITIES = ("cumulative", "delta")
GENAI_APIS = frozenset(("openai", "anthropic"))
# What an export that failed is counted as (zerolayer_otlp_dropped_total's reason).
REASONS = ("unreachable", "timeout", "rejected", "failed", "other")
EXPORTS = Metric("otlp_exports", "OTLP exports of the streams' metrics the receiver accepted")
DROPPED = Metric("otlp_dropped", "OTLP exports that did not get through, by reason (the next "
                 "export carries their data)", by="reason", reasons=REASONS)
NEEDS_SDK = ("OTLP export needs OpenTelemetry's SDK and OTLP/HTTP exporter: "
             "pip install 'zerolayer[otlp]'")


@dataclass(frozen=True)
class OtlpOptions:
    """Where and how the streams' metrics are pushed."""

    url: str
    interval_s: float = 15.0
    timeout_s: float = 10.0
    ca_file: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    headers_file: str | None = None  # "Name: value" lines, root-checked (secrets)
    temporality: str = "cumulative"


def check_url(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ZerolayerError(f"--otlp {url!r}: give an http:// or https:// URL, as "
                             "http://127.0.0.1:4318/v1/metrics")
    return url


def parse_header(text: str, where: str) -> tuple[str, str]:
    """A "Name: value" or "Name=value" header."""
    for sep in (":", "="):
        name, found, value = text.partition(sep)
        if found and name.strip() and all(c.isalnum() or c in "-_" for c in name.strip()):
            if any(c in value for c in "\r\n\0"):
                break
            return name.strip(), value.strip()
    raise ZerolayerError(f"{where}: {text[:40]!r} is not a header (Name: value)")


def read_headers(path: str) -> tuple[tuple[str, str], ...]:
    """The headers of a file that may hold secrets: root-checked like the
    configuration (a user who could write it could send root's token
    anywhere), one "Name: value" per line, # comments."""
    raw = trusted_file.read(path, "the OTLP headers file", max_bytes=64 * 1024)
    out = []
    for n, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(parse_header(line, f"{path}:{n}"))
    return tuple(out)


def _reason(outcome) -> str:
    """What an export's last HTTP attempt (status or exception) counts as."""
    if isinstance(outcome, int):
        return "rejected" if 400 <= outcome < 500 else "failed"
    name = type(outcome).__name__ if outcome is not None else ""
    if "Timeout" in name:
        return "timeout"
    if "Connection" in name or isinstance(outcome, OSError):
        return "unreachable"
    return "other"


def _session_class():
    import requests

    class BoundedSession(requests.Session):
        """A session that reads at most RESPONSE_MAX bytes of a response,
        within the request's timeout, and remembers each outcome."""

        outcome: object = None

        def request(self, method, url, *args, **kwargs):
            timeout = kwargs.get("timeout") or 10.0
            kwargs["stream"] = True
            self.outcome = None
            try:
                resp = super().request(method, url, *args, **kwargs)
            except Exception as exc:
                self.outcome = exc
                raise
            deadline = time.monotonic() + float(timeout if not isinstance(timeout, tuple)
                                                else timeout[-1])
            body = bytearray()
            try:
                for piece in resp.iter_content(8192):
                    body += piece[: RESPONSE_MAX - len(body)]
                    if len(body) >= RESPONSE_MAX or time.monotonic() > deadline:
                        break
            except Exception:  # a reset or a broken body: the status still counts
                pass
            finally:
                resp.close()
            resp._content = bytes(body)  # what the exporter may read of it
            self.outcome = resp.status_code
            return resp

    return BoundedSession


class OtlpPusher:
    """Pushes METRICS (a StreamMetrics) as OPTIONS say until close()."""

    def __init__(self, metrics, options: OtlpOptions, log) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )
        except ImportError:
            raise ZerolayerError(NEEDS_SDK) from None
        if options.temporality not in TEMPORALITIES:
            raise ZerolayerError(f"OTLP temporality {options.temporality!r}: use cumulative "
                                 "or delta")
        check_url(options.url)
        headers = dict(options.headers)
        if options.headers_file:
            headers.update(read_headers(options.headers_file))
        self._private = tempfile.mkdtemp(prefix="zerolayer-otlp-")
        ca = None
        if options.ca_file:
            # Checked and read once; the exporter reads our private copy, so
            # nobody can swap the file it trusts later.
            ca = os.path.join(self._private, "ca.pem")
            with open(ca, "wb") as f:
                f.write(trusted_file.read(options.ca_file, "the OTLP CA file"))
        # The SDK logs a receiver's answer as it came: never printed; the
        # reasons are ours (one line a minute).
        quiet = logging.getLogger("opentelemetry.exporter")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        self._make = lambda: OTLPMetricExporter(
            endpoint=options.url, certificate_file=ca, headers=headers,
            timeout=options.timeout_s, session=_session_class()())
        self._exporter = self._make()
        self.options = options
        self._metrics = metrics
        self._log = log
        self._start_ns = time.time_ns()
        self._sent_ns = self._start_ns
        self._sent: dict = {}  # delta: the series as the last export that got through had them
        self._resource_base = {"host.name": socket.gethostname()[:64]}
        self.exports = 0
        self.dropped = dict.fromkeys(REASONS, 0)
        self._failures = 0
        self._said_at = 0.0
        self._unsaid = 0
        self._last_reason = ""
        self._lock = threading.Lock()  # one export at a time
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zerolayer-otlp", daemon=True)
        self._thread.start()

    # --- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            # after failures, twice as long each time, up to 8 intervals (at most MAX_BACKOFF_S)
            every = self.options.interval_s
            wait = min(every * (2 ** min(self._failures, 3)), max(every, MAX_BACKOFF_S))
            if self._stop.wait(wait):
                return
            self.export_once(self._exporter)

    def export_once(self, exporter, timeout_s: float | None = None) -> bool:
        """One export now; whether the receiver took it."""
        from opentelemetry.sdk.metrics.export import MetricExportResult

        with self._lock:
            now = time.time_ns()
            series, streams = self._metrics.snapshot()
            data = self.metrics_data(series, now)
            if data is None:
                return True
            timeout = timeout_s if timeout_s is not None else self.options.timeout_s
            outcome: object = None
            try:
                ok = exporter.export(data, timeout_millis=timeout * 1000) \
                    == MetricExportResult.SUCCESS
            except Exception as exc:  # the SDK's own failure: counted, never raised here
                ok, outcome = False, exc
            else:
                outcome = getattr(exporter_session(exporter), "outcome", None)
            if ok:
                self.exports += 1
                self._failures = 0
                self._sent, self._sent_ns = series, now
                return True
            reason = _reason(outcome)
            self.dropped[reason] += 1
            self._failures += 1
            self._unsaid += 1
            self._last_reason = (f"HTTP {outcome}" if isinstance(outcome, int) else reason)
            if time.monotonic() - self._said_at >= SAY_EVERY_S:
                self._said_at = time.monotonic()
                self._log(f"OTLP export to {self.options.url} did not get through "
                          f"({self._unsaid} since the last word; last: {self._last_reason}); "
                          "the next export carries its data")
                self._unsaid = 0
            return False

    def metrics_data(self, series: dict, now_ns: int):
        """SERIES (Key: _Series) as OTLP's MetricsData, or None when empty."""
        from opentelemetry.sdk.metrics.export import (
            AggregationTemporality,
            MetricsData,
            ResourceMetrics,
            ScopeMetrics,
        )
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        delta = self.options.temporality == "delta"
        temporality = AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE
        start = self._sent_ns if delta else self._start_ns
        by_identity: dict = {}
        for key, one in series.items():
            before = self._sent.get(key) if delta else None
            by_identity.setdefault(key.identity, []).append((key, one, before))
        scope = InstrumentationScope("zerolayer.streams", __version__)
        resources = []
        for who, rows in sorted(by_identity.items(), key=lambda kv: kv[0].service):
            metrics = _metrics_of(rows, start, now_ns, temporality)
            if metrics:
                resource = Resource({**self._resource_base, **who.attributes(),
                                     "service.instance.id": self._instance(who)})
                resources.append(ResourceMetrics(resource, [ScopeMetrics(scope, metrics, "")], ""))
        return MetricsData(resources) if resources else None

    def _instance(self, who) -> str:
        """service.instance.id: this node, and what tells this identity from
        another of the same service.name here (a receiver such as
        Prometheus keys series by service name and instance only)."""
        parts = [self._resource_base["host.name"]]
        if who.executable and who.executable != who.service:
            parts.append(who.executable)
        if who.container_id:
            parts.append(who.container_id[:12])
        elif who.pod_uid:
            parts.append(who.pod_uid)
        return "/".join(parts)

    # --- read by a scrape ------------------------------------------------------------------

    def collector(self):
        pusher = self

        class _Collector:
            def collect(self):
                yield family(EXPORTS, value=pusher.exports)
                fam = family(DROPPED)
                for reason in REASONS:
                    fam.add_metric([reason], pusher.dropped[reason])
                yield fam

        return _Collector()

    def close(self) -> None:
        """Stop, flushing once more for at most FLUSH_S (a receiver that
        hangs cannot hold the stop up)."""
        self._stop.set()
        self._thread.join(timeout=0.1)
        flush = threading.Thread(target=self._flush, name="zerolayer-otlp-flush", daemon=True)
        flush.start()
        flush.join(timeout=FLUSH_S)
        shutil.rmtree(self._private, ignore_errors=True)

    def _flush(self) -> None:
        if self._lock.acquire(timeout=FLUSH_S / 2):
            self._lock.release()  # an export under way ended: flush anew
            self.export_once(self._make(), timeout_s=FLUSH_S * 0.8)


def exporter_session(exporter):
    """The requests session an OTLPMetricExporter sends with (where the
    SDK keeps it varies between its releases)."""
    for holder in (exporter, getattr(exporter, "_client", None)):
        for name in ("_session",):
            found = getattr(holder, name, None)
            if found is not None:
                return found
        transport = getattr(holder, "_transport", None)
        if transport is not None and getattr(transport, "_session", None) is not None:
            return transport._session
    return None


def _attributes(key: Key) -> dict[str, str | int]:
    out: dict[str, str | int] = {"zerolayer.stream.side": key.side, "zerolayer.stream.api": key.api,
           "zerolayer.tls": key.tls}
    if key.operation:
        out["gen_ai.operation.name"] = key.operation
    if key.api in GENAI_APIS:
        out["gen_ai.provider.name"] = key.api
    if key.model and key.model != "unknown":
        out["gen_ai.request.model"] = key.model
    if key.server:
        address, _, port = key.server.rpartition(":")
        if address and port.isdigit():
            out["server.address"] = address.strip("[]")
            out["server.port"] = int(port)
    return out


def names(key: Key) -> tuple[str, str, str]:
    """The (time to first chunk, time per output chunk, duration) names of
    KEY's series: GenAI's client names for a client stream of a known API."""
    if key.side == "client" and key.api in GENAI_APIS:
        prefix = "gen_ai.client.operation."
        return prefix + "time_to_first_chunk", prefix + "time_per_output_chunk", \
            prefix + "duration"
    prefix = "zerolayer.stream."
    return prefix + "time_to_first_chunk", prefix + "time_per_output_chunk", prefix + "duration"


_DESCRIPTIONS = {
    "time_to_first_chunk": "Time from a streaming request's last byte to its first chunk",
    "time_per_output_chunk": "Time between consecutive chunks of a stream",
    "duration": "A stream's duration, from its request's last byte to its end",
}


def _metrics_of(rows, start: int, now: int, temporality) -> list:
    """The OTLP Metrics of one resource's ROWS: (Key, series, series at the
    last export or None)."""
    from opentelemetry.sdk.metrics.export import (
        Histogram,
        HistogramDataPoint,
        Metric,
        NumberDataPoint,
        Sum,
    )

    points: dict[str, list] = {}

    def hist(name, attrs, bounds, counts, total, before_counts, before_total):
        if before_counts is not None:
            counts = [a - b for a, b in zip(counts, before_counts)]
            total -= before_total
        n = sum(counts)
        if n <= 0:
            return
        points.setdefault(name, []).append(HistogramDataPoint(
            attributes=attrs, start_time_unix_nano=start, time_unix_nano=now, count=n,
            sum=total, bucket_counts=list(counts), explicit_bounds=list(bounds), min=None,
            max=None, exemplars=[]))

    chunk_points = []
    for key, one, before in rows:
        attrs = _attributes(key)
        ttft, gaps, duration = names(key)
        hist(ttft, attrs, stream_metrics.TTFT_BUCKETS, one.ttft, one.ttft_sum,
             before.ttft if before else None, before.ttft_sum if before else 0.0)
        hist(gaps, attrs, stream_metrics.GAP_BUCKETS, one.gaps, one.gaps_sum,
             before.gaps if before else None, before.gaps_sum if before else 0.0)
        for status, (counts, total) in sorted(one.durations.items()):
            was = before.durations.get(status) if before else None
            with_status = {**attrs, "zerolayer.stream.status": status}
            if status in ("error", "cancelled"):
                with_status["error.type"] = status
            hist(duration, with_status, stream_metrics.DURATION_BUCKETS, counts, total,
                 was[0] if was else (None if before is None else [0] * len(counts)),
                 was[1] if was else 0.0)
        chunks = one.chunks - (before.chunks if before else 0)
        if chunks > 0:
            chunk_points.append(NumberDataPoint(attributes=attrs, start_time_unix_nano=start,
                                                time_unix_nano=now, value=chunks, exemplars=[]))
    out = []
    for name, pts in sorted(points.items()):
        what = name.rsplit(".", 1)[1]
        out.append(Metric(name, _DESCRIPTIONS[what], "s",
                          Histogram(pts, temporality)))
    if chunk_points:
        out.append(Metric("zerolayer.stream.chunks", "Chunks (events carrying generated output)",
                          "{chunk}", Sum(chunk_points, temporality, True)))
    return out
