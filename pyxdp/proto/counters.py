# SPDX-License-Identifier: Apache-2.0
"""The one table of zerolayer's counters and metrics, and what follows from it.

COUNTERS is struct zl_counters (bpf/zl_structs.h), field by field in its
order. A row gives a counter's name (the C field, and the key of `zerolayer
stats --json`, docs/spec.md §3), whether it counts by reason (an array in C,
a label in Prometheus), its help text and unit, and how `top` and `stats
--watch` show it. The token streams' metrics are rows of the same kind,
kept in their wing (pyxdp.streams.metric_rows, docs/spec.md §11.5). The
exporter, stats, top and the streams' metrics are made from these rows; tests/test_counter_table.py holds
the C struct, the Grafana dashboard and the spec to them.

A new XDP counter is a row here, its field and increment in the C, and its
line in the judge (pyxdp.proto.judge.expected), as CONTRIBUTING.md says.

Internally counters are flat dicts with dotted keys ("frames.token");
nest() gives the JSON shape.
"""

import struct
from dataclasses import dataclass

from pyxdp.cstruct import Layout
from pyxdp.proto.frames import FRAME_TYPES

FRAME_LABELS = tuple(t.label for t in FRAME_TYPES)  # by type value: request..pong
# Why a datagram is malformed. The C numbers them from 1 in this order
# (ZL_SHORT_HEADER = 1...: pyxdp.xdp.compiler.shared_defines) and counts
# reason N at malformed[N - 1].
REASONS = ("short_header", "truncated", "unknown_type", "too_many_frames", "bad_checksum")
# Why a token datagram was not forwarded, with forwarding on (docs/spec.md
# §2.1). Numbered from 1 in this order in the C too (ZL_FWD_NO_NEIGHBOUR =
# 1...), counted at forward[N - 1].
FORWARD_REASONS = ("no_neighbour", "local", "ttl", "too_big", "not_forwardable")


@dataclass(frozen=True)
class Metric:
    """One row of the table."""

    name: str  # XDP: the C field and the stats key; streams: the metric's name after zerolayer_
    help: str  # the exporter's HELP
    kind: str = "counter"  # or "gauge", "histogram"
    unit: str = ""  # Prometheus's base unit, which ends the name ("bytes", "seconds"); "": a count
    labels: tuple[str, ...] = ()  # labels of every series (the exporter adds interface, netns)
    by: str = ""  # counted by reason: the label naming the reason...
    reasons: tuple[str, ...] = ()  # ...and the reasons, in the C's order
    metric: str = ""  # the metric's name after zerolayer_, when it is not NAME
    view: str = ""  # top and `stats --watch` show its rate under this word ("": they do not)
    view_reason: str = ""  # by reason: the views show this reason's rate, not all together
    parser: str = ""  # counted by this parser only: the views leave it out under the other

    @property
    def prometheus(self) -> str:
        return f"zerolayer_{self.metric or self.name}"


COUNTERS = (
    Metric("packets", "Packets the XDP program saw", view="pkt"),
    Metric("other", "Packets that are not token traffic, passed untouched",
           metric="other_packets", view="other"),
    Metric("fragments", "IP fragments, passed unparsed"),
    # A datagram the direct parser passes unjudged (docs/spec.md §1.7). Its
    # walk result, ZL_BEYOND_WINDOW in the C, is numbered after the reasons
    # but is not one.
    Metric("beyond_window", "Token-port datagrams passed unjudged: a frame header lies past "
           "what the direct parser can read", view="beyond", parser="direct"),
    Metric("token_datagrams", "UDP datagrams whose every frame is valid", view="token dgram"),
    Metric("frames", "Frames in token datagrams, by type", by="type", reasons=FRAME_LABELS,
           view="tokens", view_reason="token"),
    Metric("payload_bytes", "Frame payload bytes in token datagrams", unit="bytes"),
    Metric("redirected", "Token datagrams redirected to an AF_XDP socket", view="redirect"),
    Metric("fallback_passed", "Token datagrams passed to the kernel: no AF_XDP socket on "
           "their queue", view="fallback"),
    Metric("malformed", "Malformed datagrams, by the first reason met", by="reason",
           reasons=REASONS, view="malformed"),
    Metric("malformed_dropped", "Malformed datagrams dropped"),
    Metric("malformed_passed", "Malformed datagrams passed (policy pass)"),
    Metric("forwarded", "Token datagrams routed out of an egress interface by XDP forwarding",
           view="forward"),
    Metric("forward", "Token datagrams XDP forwarding left to the normal verdict, by reason",
           by="reason", reasons=FORWARD_REASONS, metric="not_forwarded"),
    # Multi-buffer XDP (docs/spec.md §1.9): the full parser's only.
    Metric("multi_buffer_passed", "Token datagrams in several buffers passed to the kernel: "
           "their queue's AF_XDP socket takes one buffer a packet", view="multibuf",
           parser="full"),
)

# struct zl_counters: a u64 per plain counter, an array of them per counter by reason.
LAYOUT = Layout("zl_counters", *((c.name, f"{len(c.reasons)}Q" if c.by else "Q")
                                 for c in COUNTERS))
# Its counters in order, flat: "frames.token", "malformed.truncated".
FIELDS = LAYOUT.value_names(**{c.name: c.reasons for c in COUNTERS if c.by})
# The counters top and `stats --watch` show, in this order.
VIEWED = tuple(c for c in COUNTERS if c.view)


def family(m: Metric, labels: tuple[str, ...] = (), value: float | None = None):
    """M's prometheus_client family: one VALUE, or series labelled LABELS (the
    exporter's interface and netns), M's own labels and its reason, in that order."""
    from prometheus_client import core

    make = {"counter": core.CounterMetricFamily, "gauge": core.GaugeMetricFamily,
            "histogram": core.HistogramMetricFamily}[m.kind]
    if value is not None:
        return make(m.prometheus, m.help, value=value, unit=m.unit)
    return make(m.prometheus, m.help, labels=[*labels, *m.labels, *([m.by] if m.by else [])],
                unit=m.unit)


# --- counters as dicts ----------------------------------------------------------------

def zero() -> dict[str, int]:
    return dict.fromkeys(FIELDS, 0)


def from_percpu(raw: bytes, ncpus: int, fields=FIELDS) -> dict[str, int]:
    """Sum one struct of u64 FIELDS (zl_counters by default) per possible CPU."""
    layout = struct.Struct(f"={len(fields)}Q")
    total = [0] * len(fields)
    for cpu in range(ncpus):
        for i, value in enumerate(layout.unpack_from(raw, cpu * layout.size)):
            total[i] += value
    return dict(zip(fields, total))


def delta(after: dict[str, int], before: dict[str, int], fields=FIELDS) -> dict[str, int]:
    return {k: after[k] - before[k] for k in fields}


def nest(flat: dict[str, int] | dict[str, float], fields=FIELDS) -> dict:
    """Flat dotted keys to the JSON shape of `zerolayer stats --json`."""
    out: dict = {}
    for key in fields:
        group, _, name = key.partition(".")
        if name:
            out.setdefault(group, {})[name] = flat[key]
        else:
            out[key] = flat[key]
    return out


def flatten(nested: dict, fields=FIELDS) -> dict[str, int]:
    flat = {}
    for key in fields:
        group, _, name = key.partition(".")
        flat[key] = nested[group][name] if name else nested[key]
    return flat


def viewed(flat: dict, parser: str | None) -> list[float | None]:
    """What top and `stats --watch` show of FLAT (counts or rates) under
    PARSER, a value for each counter of VIEWED: None where PARSER does not
    count it, the sum of its reasons for one by reason (or its view_reason's)."""
    out: list[float | None] = []
    for c in VIEWED:
        if c.parser and c.parser != parser:
            out.append(None)
        else:
            reasons = (c.view_reason,) if c.view_reason else c.reasons
            out.append(sum(flat[f"{c.name}.{r}"] for r in reasons) if c.by else flat[c.name])
    return out
