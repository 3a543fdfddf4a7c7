# SPDX-License-Identifier: Apache-2.0
"""Runs whose sender kept its schedule. The paced sender stamps each frame
as it sends it, but one that fell behind (its CPU taken by the host, here a
2-vCPU guest) then sends what it owes in a burst, and the consumer's p99
measures the burst, not its own wake-up. A ratio taken within a round over
the rounds where both runs' senders were on time says what the paths do
when the machine leaves them alone; the all-rounds median says what a
user's busy machine gives. Both are reported; targets judge the latter.

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


def ratio(over: list[dict], under: list[dict], bound: float) -> dict | None:
    """p99 of OVER's run over UNDER's, within each round where both senders
    were on time (p99 lateness at most BOUND µs); None if no round was."""
    def kept(runs):
        return {r["round"]: r["p99_us"] for r in runs if r["sender"]["late_p99_us"] <= bound}

    a, b = kept(over), kept(under)
    values = [a[n] / b[n] for n in sorted(a) if b.get(n)]
    return figure(values) if values else None
