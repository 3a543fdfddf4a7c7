# SPDX-License-Identifier: Apache-2.0
"""A ratio over the rounds whose sender kept its schedule
(pyxdp/bench/latency/on_time.py): a round counts only when both runs'
senders were on time, and the bound follows the section's own runs."""

from pyxdp.bench.latency import on_time


def run(rnd: int, p99: float, late: float) -> dict:
    return {"round": rnd, "p99_us": p99, "sender": {"late_p99_us": late}}


def test_a_round_counts_only_when_both_senders_were_on_time():
    over = [run(0, 40, 25), run(1, 900, 2400), run(2, 60, 26)]
    under = [run(0, 20, 24), run(1, 30, 25), run(2, 30, 400)]
    bound = on_time.bound_us(over + under)
    assert bound == on_time.LATE_FACTOR * 25.5  # the median of the six
    fig = on_time.ratio(over, under, bound=bound)
    assert fig["values"] == [2.0] and fig["rounds"] == 1


def test_no_round_on_time_is_none_not_a_ratio():
    over, under = [run(0, 40, 500)], [run(0, 20, 25)]
    assert on_time.ratio(over, under, bound=30.0) is None
    assert on_time.ratio(over, under)["values"] == [2.0]  # every round, without a bound
