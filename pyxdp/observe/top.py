# SPDX-License-Identifier: Apache-2.0
"""`zerolayer top`: a live view of every attached interface, its rates, its
busiest flows and its token gap histogram, refreshed like xdp-bench and htop.

render() turns two reads of the pinned tree into lines of text; run() draws
them with curses until q or Ctrl-C, and curses.wrapper puts the terminal
back however it ends. json_lines() gives the same reads as one JSON object
per interval, for scripts (`top --json`).
"""

import time
from collections.abc import Iterator

from pyxdp.human import number
from pyxdp.kernel.signals import stop_on_signals
from pyxdp.observe import xsk_sockets
from pyxdp.proto import counters
from pyxdp.xdp import flows

KEYS_HELP = "q quit  +/- interval"
MIN_INTERVAL, MAX_INTERVAL = 0.25, 10.0
BAR_WIDTH = 30


# A column per counter the table gives a view (pyxdp.proto.counters.VIEWED).
RATE_HEADINGS = tuple(f"{c.view.upper()}/S" for c in counters.VIEWED)


def _rate_cells(o: flows.Observation, before: flows.Observation | None,
                seconds: float) -> list[str]:
    """O's rate of each viewed counter since BEFORE, "-" where there is none."""
    if before is None or seconds <= 0:
        return ["-"] * len(RATE_HEADINGS)
    rates = {k: v / seconds for k, v in counters.delta(o.counters, before.counters).items()}
    return ["-" if v is None else number(round(v, 1)) for v in counters.viewed(rates, o.parser)]


def _cells(cells) -> str:
    return " ".join(f"{cell:>{max(len(h), 8)}}" for h, cell in zip(RATE_HEADINGS, cells))


def _flow_rows(o: flows.Observation, before: flows.Observation | None, seconds: float,
               limit: int) -> list[str]:
    rates = flows.interval_rates(before.flows, o.flows, seconds) if before else {}
    ranked = sorted(o.flows, key=lambda f: (rates.get(f.key, 0.0), f.tokens), reverse=True)
    rows = [f"  {'SRC':<44} {'DPORT':>5} {'TOKENS/S':>9} {'TOKENS':>9} "
            f"{'GAP P50':>9} {'P90':>9} {'P99':>9} {'IDLE':>7}"]
    for f in ranked[:limit]:
        pct = flows.percentile_labels(f.gaps)
        rate = number(round(rates[f.key], 1)) if f.key in rates else "-"
        idle = (o.at_ns - f.last_ns) / 1e9
        rows.append(f"  {f.src:<44} {f.dport:>5} {rate:>9} {number(f.tokens):>9} "
                    f"{pct['p50']:>9} {pct['p90']:>9} {pct['p99']:>9} {idle:>6.1f}s")
    if len(rows) == 1:
        rows.append("  (no flows yet)" if o.flow_tracking else
                    "  (flow tracking is off on this interface)")
    return rows


def _histogram_rows(hist: list[int]) -> list[str]:
    """Bars for the non-empty span of buckets."""
    used = [i for i, n in enumerate(hist) if n]
    if not used:
        return ["  (no gap samples yet)"]
    peak = max(hist)
    rows = []
    for i in range(used[0], used[-1] + 1):
        bar = "#" * (round(hist[i] / peak * BAR_WIDTH) if hist[i] else 0)
        rows.append(f"  {flows.bucket_label(i):>9} {bar:<{BAR_WIDTH}} {number(hist[i])}")
    return rows


def _name(o: flows.Observation) -> str:
    return f"{o.netns}/{o.interface}" if o.netns else o.interface


def _af_xdp(now: list[flows.Observation]) -> dict:
    """(netns, interface) -> the AF_XDP sockets bound there."""
    by_iface: dict = {}
    for s in xsk_sockets.bound(now).sockets:
        by_iface.setdefault((s.netns, s.interface), []).append(s)
    return by_iface


def _af_xdp_cell(sockets: list) -> str:
    """The sockets' modes, e.g. "zc:2", "copy:1", "-" for none."""
    modes = sorted({s.mode for s in sockets})
    short = {"zerocopy": "zc"}
    return ",".join(f"{short.get(m, m)}:{sum(s.mode == m for s in sockets)}" for m in modes) or "-"


def render(now: list[flows.Observation], before: dict, seconds: float, errors: list[str],
           interval: float, flows_per_interface: int = 5) -> list[str]:
    """The screen, as lines. BEFORE maps (netns, interface) to the previous
    read, for rates; SECONDS is the time between the two reads."""
    lines = [f"zerolayer top - {time.strftime('%H:%M:%S')} - "
             f"{len(now)} interface{'s' if len(now) != 1 else ''} - every {interval:g}s - {KEYS_HELP}"]
    if not now:
        lines += ["", "no interface has zerolayer attached (see `zerolayer status`; "
                      "attach with `zerolayer attach IFACE`)"]
    af_xdp = _af_xdp(now)
    lines += [""] + [f"{'INTERFACE':<32} {'MODE':<7} {'AF_XDP':<7} {'PARSER':<6} "
                     f"{_cells(RATE_HEADINGS)} {'FLOWS':>6}"]
    previous = [before.get((o.netns, o.interface)) for o in now]
    for o, prev in zip(now, previous):
        lines.append(
            f"{_name(o)[-32:]:<32} {(o.mode or 'stale'):<7} "
            f"{_af_xdp_cell(af_xdp.get((o.netns, o.interface), [])):<7} {(o.parser or '-'):<6} "
            f"{_cells(_rate_cells(o, prev, seconds))} {len(o.flows):>6}")
    for o, prev in zip(now, previous):
        name = _name(o)
        lines += ["", f"{name}: top flows by tokens/s"]
        lines += _flow_rows(o, prev, seconds, flows_per_interface)
        lines += ["", f"{name}: token gaps, all flows since attach"]
        lines += _histogram_rows(o.gap_hist)
    for err in errors:
        lines += ["", f"skipped {err}"]
    return lines


def snapshot(now: list[flows.Observation], before: dict, seconds: float, errors: list[str],
             flows_per_interface: int = 5) -> dict:
    """One `top --json` line: each interface's counters, their per-second
    rates over the SECONDS since BEFORE (null for an interface new since),
    and its busiest flows by live tokens/s, as `stats --flows --json` has them."""
    interfaces = []
    af_xdp = _af_xdp(now)
    for o in now:
        prev = before.get((o.netns, o.interface))
        rates = flows.interval_rates(prev.flows, o.flows, seconds) if prev else {}
        ranked = sorted(o.flows, key=lambda f: (rates.get(f.key, 0.0), f.tokens), reverse=True)
        interfaces.append({
            "interface": o.interface, "netns": o.netns, "mode": o.mode,
            "program_id": o.program_id, "attached": o.attached,
            "af_xdp": [s.to_json() for s in af_xdp.get((o.netns, o.interface), [])],
            "counters": counters.nest(o.counters),
            "rates": None if prev is None else counters.nest(
                {k: round(v / seconds, 1)
                 for k, v in counters.delta(o.counters, prev.counters).items()}),
            "flow_tracking": o.flow_tracking, "flows_total": len(o.flows),
            "gap_histogram": {"buckets": o.gap_hist, "sum_ns": o.gap_sum_ns},
            "flows": [f.to_json(o.at_ns, None if prev is None else round(rates[f.key], 1))
                      for f in ranked[:flows_per_interface]],
        })
    return {"interval_s": round(seconds, 3), "interfaces": interfaces, "skipped": errors}


def json_lines(interval: float = 1.0, flows_per_interface: int = 5, count: int | None = None,
               only_netns: str | None = None) -> Iterator[dict]:
    """A snapshot() every INTERVAL seconds, each with rates over the interval
    before it, until COUNT of them (None: until SIGINT or SIGTERM)."""
    with stop_on_signals() as stop:
        seen, _ = flows.observe_all(only_netns)
        before = {(o.netns, o.interface): o for o in seen}
        at = time.monotonic_ns()
        made = 0
        while count is None or made < count:
            if stop.wait(interval):
                return
            seen, errors = flows.observe_all(only_netns)
            now_ns = time.monotonic_ns()
            yield snapshot(seen, before, (now_ns - at) / 1e9, errors, flows_per_interface)
            before, at, made = {(o.netns, o.interface): o for o in seen}, now_ns, made + 1


def run(interval: float = 1.0, flows_per_interface: int = 5,
        only_netns: str | None = None) -> None:
    """Draw until q or Ctrl-C."""
    import curses

    def loop(screen):
        nonlocal interval
        curses.curs_set(0)
        screen.timeout(100)
        before: dict = {}
        before_ns = None
        while True:
            now, errors = flows.observe_all(only_netns)
            at = time.monotonic_ns()
            seconds = (at - before_ns) / 1e9 if before_ns else 0.0
            _draw(screen, render(now, before, seconds, errors, interval, flows_per_interface))
            before = {(o.netns, o.interface): o for o in now}
            before_ns = at
            deadline = time.monotonic() + interval
            while time.monotonic() < deadline:
                key = screen.getch()
                if key in (ord("q"), ord("Q")):
                    return
                if key in (ord("+"), ord("-")):
                    step = 2.0 if key == ord("+") else 0.5
                    interval = min(MAX_INTERVAL, max(MIN_INTERVAL, interval * step))
                    break

    try:
        curses.wrapper(loop)
    except KeyboardInterrupt:
        pass  # Ctrl-C is a way to quit; wrapper has restored the terminal


def _draw(screen, lines: list[str]) -> None:
    import curses

    screen.erase()
    height, width = screen.getmaxyx()
    for y, line in enumerate(lines[:height]):
        try:
            screen.addnstr(y, 0, line, width - 1, curses.A_BOLD if y == 0 else 0)
        except curses.error:
            pass  # the last cell of a shrinking terminal
    screen.refresh()
