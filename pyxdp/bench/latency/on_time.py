# SPDX-License-Identifier: Apache-2.0
"""Ratios taken within a round, and the rounds whose sender kept its
schedule. The paced sender stamps each frame as it sends it, but one that
fell behind (its CPU taken by the host, here a 2-vCPU guest) then sends
what it owes in a burst, and the consumer's p99 measures the burst, not
its own wake-up. A ratio over the rounds where both runs' senders were on
time says what the paths do when the machine leaves them alone; the
all-rounds median says what a user's busy machine gives. Both are
reported; targets judge the latter.

On time: the sender's p99 lateness (how late it sent against its schedule,
paced_sender.c) at most LATE_FACTOR times the median of every run of that
load in the section.
"""

import statistics

from pyxdp.bench.figures import figure

LATE_FACTOR = 2.0


def bound_us(runs: list[dict]) -> float:
    """The p99 lateness a run of RUNS (one load's) may have and be on time."""
    return LATE_FACTOR * statistics.median(r["sender"]["late_p99_us"] for r in runs)


def late_note(runs: list[dict], field: str) -> str:
    """How many of RUNS had their sender late, for a section's notes; FIELD
    names the report's ratio that leaves them out."""
    bound = bound_us(runs)
    late = sum(r["sender"]["late_p99_us"] > bound for r in runs)
    return (f"the sender was late (p99 lateness above {bound:,.1f} us, {LATE_FACTOR:g}x the "
            f"median) in {late} of {len(runs)} runs; {field} leaves their rounds out")


def ratio(over: list[dict], under: list[dict], key: str = "p99_us",
          bound: float | None = None) -> dict | None:
    """KEY of OVER's run over UNDER's, within each round (runs carry
    "round"); with BOUND, only the rounds where both senders were on time
    (p99 lateness at most BOUND µs). None if no round counts."""
    def kept(runs):
        return {r["round"]: r[key] for r in runs
                if bound is None or r["sender"]["late_p99_us"] <= bound}

    a, b = kept(over), kept(under)
    values = [a[n] / b[n] for n in sorted(a) if b.get(n)]
    return figure(values) if values else None
