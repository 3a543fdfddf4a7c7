# SPDX-License-Identifier: Apache-2.0
"""Per-flow token cadence, as the XDP program records it (bpf/zl_flows.h):
the flow table's decoding, gap percentiles from the log2 histogram, the
`zerolayer stats --flows` report, and one read of every attached interface
for the exporter and `zerolayer top`.

A flow is (source address, source port, destination port, IP version).
Each TOKEN frame adds a gap sample: the time since the flow's previous TOKEN
frame, measured when the datagram arrives (tokens sharing a datagram have
gap 0); REQUEST and DONE reset the clock, so a stream's first token has no
sample. The histogram has log2 microsecond buckets, so a percentile is
known to within a factor of two: we report the upper edge of its bucket.
"""

import ipaddress
import time
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys
from pyxdp.proto import counters
from pyxdp.xdp import ownership, pins, stats
from pyxdp.xdp.maps import FLOW, FLOW_KEY, GAP_BUCKETS, GAP_HIST, ZerolayerMaps

# Upper edges of the buckets in microseconds; the last bucket has none.
BUCKET_LE_US: tuple[int | None, ...] = tuple(1 << k for k in range(GAP_BUCKETS - 1)) + (None,)
_FLOW_FIELDS = FLOW.value_names(frames=counters.FRAME_LABELS)
_GAP_HIST_FIELDS = GAP_HIST.value_names()  # sum_ns, then the buckets


def gap_bucket(gap_ns: int) -> int:
    """The histogram bucket of a gap: the bit length of whole microseconds,
    capped. The C side (zl_gap_bucket) must agree."""
    return min((gap_ns // 1000).bit_length(), GAP_BUCKETS - 1)


def bucket_label(index: int) -> str:
    """'<1us', '<2us', ... '<1.05s', '>=1.05s' for a person."""
    if index == GAP_BUCKETS - 1:
        return ">=" + format_us(1 << (index - 1))  # the last finite edge
    return "<" + format_us(1 << index)


def format_us(us: float) -> str:
    if us < 1000:
        return f"{us:g}us"
    if us < 1_000_000:
        return f"{us / 1000:.3g}ms"
    return f"{us / 1_000_000:.3g}s"


def percentile_bucket(hist, q: float) -> int | None:
    """The bucket holding the Q-quantile of HIST; None if HIST is empty."""
    total = sum(hist)
    if not total:
        return None
    seen = 0
    for index, count in enumerate(hist):
        seen += count
        if count and seen >= q * total:
            return index
    return len(hist) - 1


PERCENTILES = (50, 90, 99)


def percentile_buckets(hist) -> dict[str, int | None]:
    """p50/p90/p99 of HIST as bucket indexes, None when empty."""
    return {f"p{q}": percentile_bucket(hist, q / 100) for q in PERCENTILES}


def percentile_labels(hist) -> dict[str, str]:
    """p50/p90/p99 of HIST as bucket labels ('<32.8ms'), '-' when empty."""
    return {k: "-" if index is None else bucket_label(index)
            for k, index in percentile_buckets(hist).items()}


@dataclass(frozen=True)
class Flow:
    src_addr: str
    sport: int
    dport: int
    ip_version: int
    frames: dict[str, int]
    payload_bytes: int
    datagrams: int
    first_ns: int  # CLOCK_MONOTONIC, as time.monotonic_ns()
    last_ns: int
    gap_sum_ns: int
    gaps: tuple[int, ...]

    @property
    def src(self) -> str:
        host = f"[{self.src_addr}]" if self.ip_version == 6 else self.src_addr
        return f"{host}:{self.sport}"

    @property
    def key(self) -> tuple:
        return (self.src_addr, self.sport, self.dport, self.ip_version)

    @property
    def tokens(self) -> int:
        return self.frames["token"]

    @property
    def avg_tokens_per_s(self) -> float | None:
        """Token frames over the flow's life in the table, first to latest
        datagram (so idle time after the last one does not lower it); None
        until it spans some time. The live rate is interval_rates'."""
        span = self.last_ns - self.first_ns
        return self.tokens * 1e9 / span if span > 0 else None

    def to_json(self, now_ns: int, rate: float | None) -> dict:
        """RATE: tokens/s over the report's window, None without one."""
        average = self.avg_tokens_per_s
        samples = sum(self.gaps)
        return {
            "src": self.src,
            "dport": self.dport,
            "ip_version": self.ip_version,
            "frames": self.frames,
            "payload_bytes": self.payload_bytes,
            "datagrams": self.datagrams,
            "age_s": round((now_ns - self.first_ns) / 1e9, 3),
            "idle_s": round((now_ns - self.last_ns) / 1e9, 3),
            "tokens_per_s": None if rate is None else round(rate, 1),
            "avg_tokens_per_s": None if average is None else round(average, 1),
            "gap_samples": samples,
            "gap_mean_us": round(self.gap_sum_ns / samples / 1000, 1) if samples else None,
            # upper bucket edges; null above the last finite edge (1.05 s)
            "gap_us": {k: None if b is None else BUCKET_LE_US[b]
                       for k, b in percentile_buckets(self.gaps).items()}
                      if samples else None,
            "gap_histogram": list(self.gaps),
        }


def decode(key: bytes, value: bytes) -> Flow:
    addr, sport, dport, version = FLOW_KEY.unpack(key)
    v = dict(zip(_FLOW_FIELDS, FLOW.unpack(value)))
    host = ipaddress.IPv4Address(addr[:4]) if version == 4 else ipaddress.IPv6Address(addr)
    return Flow(
        src_addr=str(host), sport=sport, dport=dport, ip_version=version,
        frames={t: v[f"frames.{t}"] for t in counters.FRAME_LABELS},
        payload_bytes=v["payload_bytes"], datagrams=v["datagrams"], first_ns=v["first_ns"],
        last_ns=v["last_ns"], gap_sum_ns=v["gap_sum_ns"],
        gaps=tuple(v[f"gaps.{i}"] for i in range(GAP_BUCKETS)),
    )


def read(maps) -> list[Flow]:
    """Every flow in the table of MAPS (a ZerolayerMaps), most tokens first."""
    m = maps["flows"]
    pairs = bpfsys.map_lookup_batch(m.fd, FLOW_KEY.size, FLOW.size, m.info.max_entries)
    return sorted((decode(k, v) for k, v in pairs), key=lambda f: f.tokens, reverse=True)


def read_gap_hist(maps) -> tuple[list[int], int]:
    """The interface's gap histogram (all flows, never evicted) and the sum
    of its gaps in ns, summed over CPUs."""
    ncpus = bpfsys.possible_cpus()
    raw = maps["gaps"].lookup(0, GAP_HIST.size * ncpus)
    total_ns, *buckets = counters.from_percpu(raw, ncpus, _GAP_HIST_FIELDS).values()
    return buckets, total_ns


def interval_rates(before: list[Flow], after: list[Flow], seconds: float) -> dict[tuple, float]:
    """Tokens/s of each flow in AFTER over an interval of SECONDS. A flow
    missing from BEFORE (new, or evicted and seen again) counts from 0."""
    old = {f.key: f for f in before}
    rates = {}
    for f in after:
        prev = old.get(f.key)
        base = prev.tokens if prev is not None and prev.first_ns == f.first_ns else 0
        rates[f.key] = (f.tokens - base) / seconds if seconds > 0 else 0.0
    return rates


def report(ifname: str, netns: str | None = None, top: int | None = None,
           window: float | None = 1.0) -> dict:
    """`zerolayer stats IFACE --flows --json`: the stats object, the
    interface's gap histogram, and the flows, most tokens first. The table
    is read twice, WINDOW seconds apart, for each flow's live rate (as
    `zerolayer top` has it); WINDOW None reads it once and gives no rate."""
    ins, maps = stats.open_pinned(ifname, netns)  # checks privileges and pins
    with maps:
        if window is not None:
            earlier, earlier_ns = read(maps), time.monotonic_ns()
            time.sleep(window)
        snap = stats.snapshot(ins, maps.read_counters())
        table = read(maps)
        hist, sum_ns = read_gap_hist(maps)
        snap["flow_tracking"] = maps.flows_enabled()
        snap["flows_capacity"] = maps["flows"].info.max_entries
    now = time.monotonic_ns()
    rates: dict[tuple, float] = {}
    if window is not None:
        elapsed = (now - earlier_ns) / 1e9
        rates = interval_rates(earlier, table, elapsed)
    snap["window_s"] = None if window is None else round(elapsed, 3)
    snap["flows_total"] = len(table)
    snap["gap_bucket_le_us"] = list(BUCKET_LE_US)
    snap["gap_histogram"] = {"buckets": hist, "sum_ns": sum_ns}
    snap["flows"] = [f.to_json(now, rates.get(f.key)) for f in (table[:top] if top else table)]
    return snap


# --- every attached interface ---------------------------------------------------

@dataclass(frozen=True)
class Observation:
    """One read of an interface zerolayer has pins for: what the exporter and
    `zerolayer top` show."""

    interface: str
    netns: str | None
    ifindex: int
    mode: str | None  # None when the pins are stale (program gone)
    program_id: int | None
    parser: str | None  # the parser variant (pyxdp.xdp.parsers); None when stale
    attached: bool
    counters: dict[str, int]  # flat, as pyxdp.proto.counters
    gap_hist: list[int]
    gap_sum_ns: int
    flow_tracking: bool
    flows_capacity: int
    flows: list[Flow]  # most tokens first
    at_ns: int  # time.monotonic_ns() of the read


def pinned() -> list[tuple[str | None, str]]:
    """(netns, interface) of every pin dir: IFACE/ and ns:NETNS/IFACE/."""
    found: list[tuple[str | None, str]] = [(None, name) for name in pins.pinned_interfaces(None)]
    for ns in pins.pinned_netns():
        found += [(ns, name) for name in pins.pinned_interfaces(ns)]
    return found


def observe(ifname: str, netns: str | None = None) -> Observation:
    ins = ownership.inspect(ifname, netns)
    with ZerolayerMaps.open_pinned(ins.pin_dir) as maps:
        counts = maps.read_counters()
        hist, sum_ns = read_gap_hist(maps)
        table = read(maps)
        tracking = maps.flows_enabled()
        capacity = maps["flows"].info.max_entries
    return Observation(
        interface=ifname, netns=netns, ifindex=ins.state.ifindex,
        mode=ins.state.mode if ins.ours else None,
        program_id=ins.program.id if ins.ours and ins.program else None, parser=ownership.parser(ins),
        attached=ins.ours,
        counters=counts, gap_hist=hist, gap_sum_ns=sum_ns, flow_tracking=tracking,
        flows_capacity=capacity, flows=table, at_ns=time.monotonic_ns(),
    )


def observe_all(only_netns: str | None = None) -> tuple[list[Observation], list[str]]:
    """Every pinned interface that can be read (of namespace ONLY_NETNS
    alone, if given), and a one-line reason for each that cannot (its
    namespace or interface is gone, or its pins come from an older zerolayer)."""
    seen, errors = [], []
    for netns, ifname in pinned():
        if only_netns is not None and netns != only_netns:
            continue
        try:
            seen.append(observe(ifname, netns))
        except (ZerolayerError, OSError) as exc:
            where = f"{ifname} in netns {netns}" if netns else ifname
            errors.append(f"{where}: {exc}")
    return seen, errors
