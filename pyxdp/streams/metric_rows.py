# SPDX-License-Identifier: Apache-2.0
"""The token streams' metric rows (docs/spec.md §11.5): each one's name, help,
kind, unit and labels, as the exporter serves them (pyxdp.streams.metrics)
and the counter-table test holds them. Rows of the same kind as the XDP
counters' (pyxdp.proto.counters.Metric)."""

from pyxdp.proto.counters import Metric
from pyxdp.streams.watchdog import STALE_AFTER_S

# The process's identity (pyxdp.streams.identity) after the stream's own:
# empty where the node does not know it (Prometheus drops empty labels).
STREAM_LABELS = ("side", "api", "tls", "model", "service", "container_id", "k8s_pod_uid")
STREAM_TTFT = Metric(
    "stream_time_to_first_chunk_seconds", "Time from a streaming request's last byte to its "
    "first chunk (client side: written to read; server side: read to written)",
    kind="histogram", unit="seconds", labels=STREAM_LABELS)
STREAM_GAPS = Metric(
    "stream_time_per_output_chunk_seconds", "Time between consecutive chunks of a stream, "
    "observed as each chunk passes", kind="histogram", unit="seconds", labels=STREAM_LABELS)
STREAMS_ENDED = Metric("streams", "Token streams that ended, by status",
                       labels=STREAM_LABELS[:3], by="status",
                       reasons=("done", "cancelled", "error", "incomplete"))
STREAM_CHUNKS = Metric("stream_chunks", "Chunks (events carrying generated output)",
                       labels=STREAM_LABELS)
STREAM_TOKENS = Metric("stream_tokens", "Output tokens, as the streams' usage reports them, "
                       "counted when a stream ends", labels=STREAM_LABELS)
STREAM_STALLS = Metric("stream_stalls", "Gaps between chunks longer than the stall threshold",
                       labels=STREAM_LABELS)
STREAM_EVICTIONS = Metric("stream_evictions", "Open streams dropped to keep the tracker bounded "
                          "(not reported; their connections ignored until closed)",
                          labels=("side",))
# These three are read from the tracker's own counters (StreamTracker.counters).
STREAMS_OPEN = Metric("streams_open", "Token streams under way", kind="gauge")
STREAM_UNSUPPORTED = Metric(
    "stream_unsupported", "What was recognised but not parsed: HTTP/2 connections that could "
    "not be read (joined mid-way, bytes lost, HPACK or framing broken), compressed streaming "
    "responses, upgraded connections", by="kind",
    reasons=("http2_unreadable", "compressed", "upgraded"))
STREAM_LOST_BYTES = Metric("stream_lost_bytes", "Bytes the capture lost (the parser "
                           "resynchronised)", unit="bytes")
# These two are the exporter's watchdog's (pyxdp.streams.watchdog).
STREAMS_STALE = Metric("streams_stale", "1 while the stream observer's loop has stood still "
                       f"for more than {STALE_AFTER_S:g} s (the streams' figures are stale), "
                       "else 0", kind="gauge")
STREAM_HEARTBEAT_AGE = Metric("stream_observer_heartbeat_age_seconds", "Seconds since the "
                              "stream observer's loop last came round", kind="gauge",
                              unit="seconds")
STREAM_METRICS = (STREAM_TTFT, STREAM_GAPS, STREAMS_ENDED, STREAM_CHUNKS, STREAM_TOKENS,
                  STREAM_STALLS, STREAM_EVICTIONS, STREAMS_OPEN, STREAM_UNSUPPORTED,
                  STREAM_LOST_BYTES, STREAMS_STALE, STREAM_HEARTBEAT_AGE)
