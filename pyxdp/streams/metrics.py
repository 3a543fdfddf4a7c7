# SPDX-License-Identifier: Apache-2.0
"""Prometheus metrics of the token streams (docs/spec.md §11.5), fed by the
tracker as chunks come (a gap is observed when its chunk is read or
written, not when the stream ends) and when streams end.

Their names, help, units and labels are rows of the table of counters and
metrics (pyxdp.streams.metric_rows, STREAM_METRICS). The histograms are named
after OpenTelemetry's GenAI chunk metrics (time to first chunk, time per
output chunk), labelled side, api, tls, model and the process's identity
(service, container, pod). model is bounded, and no user can use up the
bound for the others: each owner (the uid of the process that named the
model) may bring MODELS_PER_OWNER names; root and the first OWN_BUDGETS
other uids have a budget each, every later uid shares one. A name beyond
its owner's budget is "other"; a stream that names none is "unknown". So a
scrape holds at most MAX_MODEL_VALUES model values. Identities are bounded
to MAX_IDENTITIES (later ones are "other"), server endpoints, which only
OTLP's attributes name (pyxdp.streams.otlp), to MAX_SERVERS (later ones
go unnamed).

Each series is kept once, at its finest key (with the request's operation
and the server); a scrape sums over what Prometheus's labels do not name.
"""

import threading
from bisect import bisect_left
from typing import NamedTuple

from pyxdp.proto.counters import family
from pyxdp.streams import metric_rows as rows
from pyxdp.streams.identity import UNKNOWN, Identity

MODELS_PER_OWNER = 8
OWN_BUDGETS = 8  # uids besides root with a budget of their own
MAX_MODEL_VALUES = (OWN_BUDGETS + 2) * MODELS_PER_OWNER + 2  # root's, the shared, other, unknown
MAX_IDENTITIES = 32
MAX_SERVERS = 64
OTHER_IDENTITY = Identity("other")
# OpenTelemetry's advice for time_to_first_token, with finer steps below 10 ms.
TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                1.0, 2.5, 5.0, 7.5, 10.0)
# Gaps between chunks: OpenTelemetry's time_per_output_token buckets, with the
# sub-10 ms range a kernel sees (chunks sharing a read are 0 apart).
GAP_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
               0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
# A stream's whole duration: OpenTelemetry's advice for gen_ai.client.operation.duration.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)


class _Series:
    """One label set's histograms and counters. Written by the tracker's
    thread only; a scrape reads them as they are (each field is read whole)."""

    __slots__ = ("ttft", "ttft_sum", "gaps", "gaps_sum", "chunks", "stalls", "tokens",
                 "durations")

    def __init__(self) -> None:
        self.ttft = [0] * (len(TTFT_BUCKETS) + 1)  # the last: above every bound (+Inf only)
        self.ttft_sum = 0.0
        self.gaps = [0] * (len(GAP_BUCKETS) + 1)
        self.gaps_sum = 0.0
        self.chunks = self.stalls = self.tokens = 0
        # the ended streams' durations, by status: (counts per bucket, sum)
        self.durations: dict[str, tuple[list[int], float]] = {}

    def copy(self) -> "_Series":
        out = _Series()
        out.ttft, out.ttft_sum = list(self.ttft), self.ttft_sum
        out.gaps, out.gaps_sum = list(self.gaps), self.gaps_sum
        out.chunks, out.stalls, out.tokens = self.chunks, self.stalls, self.tokens
        out.durations = {k: (list(c), t) for k, (c, t) in list(self.durations.items())}
        return out


class Key(NamedTuple):
    """A series' finest key: what the tracker's labels say, bounded."""

    side: str
    api: str
    tls: str
    model: str
    operation: str | None
    identity: Identity
    server: str | None  # "address:port" of the stream's server

    def prometheus(self) -> tuple[str, ...]:
        who = self.identity
        return (self.side, self.api, self.tls, self.model, who.service,
                who.container_id or "", who.pod_uid or "")


class StreamMetrics:
    """Observations from StreamTracker (its metrics= argument); render() or
    collector() for the exporter. The tracker's thread feeds, a scrape
    reads: the lock guards only the tables' keys (a new label set, a scrape's
    copy), so a chunk costs no lock."""

    def __init__(self, models_per_owner: int = MODELS_PER_OWNER, counters=None,
                 health=None) -> None:
        self._lock = threading.Lock()
        self._per_owner = models_per_owner
        self._models: set[str] = set()
        self._budgets: dict[int | None, int] = {0: 0}  # uid (None: the shared one): names brought
        self._series: dict[Key, _Series] = {}   # bounded labels -> series
        self._identities: set[Identity] = set()
        self._servers: set[str] = set()
        self._by_labels: dict[tuple, _Series] = {}  # the tracker's labels -> series (a cache)
        self._streams: dict[tuple, int] = {}
        self._evicted: dict[str, int] = {}  # by side
        self._counters = counters  # optional: a callable giving the tracker's counters
        self._health = health  # optional: a callable giving (heartbeat age, stale), a watchdog's

    # --- fed by the tracker -------------------------------------------------------------

    def _get(self, labels: tuple) -> _Series:
        series = self._by_labels.get(labels)
        if series is not None:
            return series
        model = labels[3] or "unknown"
        if model not in self._models and model != "unknown":
            owner = self._owner(labels[4] if len(labels) > 4 else None)
            if self._budgets[owner] < self._per_owner:
                self._budgets[owner] += 1
                self._models.add(model)
            else:
                model = "other"
        who = labels[6] if len(labels) > 6 and labels[6] is not None else UNKNOWN
        if who not in self._identities:
            if len(self._identities) < MAX_IDENTITIES:
                self._identities.add(who)
            else:
                who = OTHER_IDENTITY
        server = labels[7] if len(labels) > 7 else None
        if server is not None and server not in self._servers:
            if len(self._servers) < MAX_SERVERS:
                self._servers.add(server)
            else:
                server = None
        key = Key(labels[0], labels[1], labels[2], model,
                  labels[5] if len(labels) > 5 else None, who, server)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series()
            if len(self._by_labels) < 64 * MAX_MODEL_VALUES:  # the cache is bounded too
                self._by_labels[labels] = series
        return series

    def _owner(self, uid: int | None) -> int | None:
        """Whose budget a model named by UID's process comes from."""
        if uid in self._budgets:
            return uid
        if uid is not None and len(self._budgets) - (None in self._budgets) <= OWN_BUDGETS:
            self._budgets[uid] = 0
            return uid
        self._budgets.setdefault(None, 0)
        return None

    def first_chunk(self, labels: tuple, seconds: float) -> None:
        series = self._by_labels.get(labels) or self._get(labels)
        series.ttft[bisect_left(TTFT_BUCKETS, seconds)] += 1
        series.ttft_sum += seconds
        series.chunks += 1

    def chunk(self, labels: tuple) -> None:
        """A first chunk whose request was not seen: no time to first chunk."""
        (self._by_labels.get(labels) or self._get(labels)).chunks += 1

    def gap(self, labels: tuple, seconds: float, stalled: bool) -> None:
        series = self._by_labels.get(labels) or self._get(labels)
        series.gaps[bisect_left(GAP_BUCKETS, seconds)] += 1
        series.gaps_sum += seconds
        series.chunks += 1
        if stalled:
            series.stalls += 1

    def finished(self, labels: tuple, status: str, tokens: int | None,
                 seconds: float | None = None) -> None:
        series = self._by_labels.get(labels) or self._get(labels)
        if tokens:
            series.tokens += tokens
        if seconds is not None:
            counts, total = series.durations.get(status) or ([0] * (len(DURATION_BUCKETS) + 1), 0.0)
            counts[bisect_left(DURATION_BUCKETS, seconds)] += 1
            series.durations[status] = (counts, total + seconds)
        skey = (*labels[:3], status)
        with self._lock:
            self._streams[skey] = self._streams.get(skey, 0) + 1

    def evicted(self, side: str, n: int) -> None:
        with self._lock:
            self._evicted[side] = self._evicted.get(side, 0) + n

    # --- read by a scrape or an export --------------------------------------------------

    def snapshot(self) -> tuple[dict[Key, _Series], dict[tuple, int]]:
        """A copy of every series at its finest key, and the ended streams by
        (side, api, tls, status): what an OTLP export sends."""
        with self._lock:
            series = list(self._series.items())
            streams = dict(self._streams)
        return {k: one.copy() for k, one in series}, streams

    def collector(self):
        """A prometheus_client collector of these metrics."""
        return _Collector(self)

    def render(self) -> bytes:
        """The text exposition format, once."""
        from prometheus_client import CollectorRegistry, generate_latest

        reg = CollectorRegistry(auto_describe=False)
        reg.register(self.collector())
        return generate_latest(reg)

    def families(self):
        """Their families, each named, described and labelled as its row of
        pyxdp.proto.counters says."""
        from prometheus_client.utils import floatToGoString

        with self._lock:
            finest = list(self._series.items())
            streams, evicted = sorted(self._streams.items()), sorted(self._evicted.items())
        series = sorted(_by_prometheus_labels(finest).items())

        def hist(m, bounds, counts_of, sum_of):
            fam = family(m)
            les = [floatToGoString(b) for b in bounds] + ["+Inf"]
            for key, one in series:
                counts = list(counts_of(one))
                if not sum(counts):
                    continue
                run, buckets = 0, []
                for le, c in zip(les, counts):
                    run += c
                    buckets.append((le, run))
                fam.add_metric(list(key), buckets, sum_of(one))
            return fam

        def counter(m, value_of):
            fam = family(m)
            for key, one in series:
                value = value_of(one)
                if value:
                    fam.add_metric(list(key), value)
            return fam

        yield hist(rows.STREAM_TTFT, TTFT_BUCKETS, lambda x: x.ttft, lambda x: x.ttft_sum)
        yield hist(rows.STREAM_GAPS, GAP_BUCKETS, lambda x: x.gaps, lambda x: x.gaps_sum)
        by_status = family(rows.STREAMS_ENDED)
        for key, value in streams:
            by_status.add_metric(list(key), value)
        yield by_status
        yield counter(rows.STREAM_CHUNKS, lambda x: x.chunks)
        yield counter(rows.STREAM_TOKENS, lambda x: x.tokens)
        yield counter(rows.STREAM_STALLS, lambda x: x.stalls)
        evictions = family(rows.STREAM_EVICTIONS)
        for side, n in {"client": 0, "server": 0, **dict(evicted)}.items():
            evictions.add_metric([side], n)
        yield evictions
        if self._counters is not None:
            c = self._counters()
            yield family(rows.STREAMS_OPEN, value=c.get("streams_open", 0))
            unsupported = family(rows.STREAM_UNSUPPORTED)
            for kind in rows.STREAM_UNSUPPORTED.reasons:
                unsupported.add_metric([kind], c.get(kind, 0))
            yield unsupported
            yield family(rows.STREAM_LOST_BYTES, value=c.get("lost_bytes", 0))
        if self._health is not None:
            age, stale = self._health()
            yield family(rows.STREAMS_STALE, value=int(stale))
            yield family(rows.STREAM_HEARTBEAT_AGE, value=round(age, 3))


def _by_prometheus_labels(finest) -> dict[tuple, _Series]:
    """The series summed over what Prometheus's labels leave out (the
    operation, the server)."""
    out: dict[tuple, _Series] = {}
    for key, one in finest:
        pkey = key.prometheus()
        total = out.get(pkey)
        if total is None:
            out[pkey] = one.copy()
            continue
        total.ttft = [a + b for a, b in zip(total.ttft, one.ttft)]
        total.ttft_sum += one.ttft_sum
        total.gaps = [a + b for a, b in zip(total.gaps, one.gaps)]
        total.gaps_sum += one.gaps_sum
        total.chunks += one.chunks
        total.stalls += one.stalls
        total.tokens += one.tokens
    return out


class _Collector:
    def __init__(self, metrics: StreamMetrics) -> None:
        self._metrics = metrics

    def collect(self):
        return self._metrics.families()
