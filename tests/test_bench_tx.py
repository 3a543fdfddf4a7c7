# SPDX-License-Identifier: Apache-2.0
"""`zerolayer bench --section tx --quick`: every key, in order, each figure
from runs that happened, and the accounting the kernel backs: what dut0
counted is what the senders sent, and the AF_XDP sink dropped what it
says it dropped. No assertion here is about speed."""

import pytest

from pyxdp.bench import runner as bench
from pyxdp.bench.tx import senders as tx_bench
from support.bench_helpers import TX_KEYS, assert_figure, bench_json

pytestmark = pytest.mark.root
QUICK_DATAGRAMS = bench.QUICK.sections["tx"].datagrams


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    plot = tmp_path_factory.mktemp("bench") / "tx.png"
    report, progress = bench_json("--section", "tx", "--quick", "--plot", plot)
    assert "sending:" in progress and "parser cost" not in progress
    assert report["plot"] == str(plot) and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return report


def test_the_tx_section_produces_every_key_in_order(report):
    assert list(report) == ["machine", "quick", *TX_KEYS, "targets", "duration_s", "plot"]
    rounds = bench.QUICK.sections["tx"].rounds
    assert report["tx_mode"] == "copy" and report["tx_datagrams"] == QUICK_DATAGRAMS
    for sink in tx_bench.SINKS:
        assert list(report["tx_dps"][sink]) == list(tx_bench.SENDERS)
        for figs in (report["tx_dps"][sink], report["tx_lost"][sink], report["tx_ratio"][sink]):
            for fig in figs.values():
                assert_figure(fig, rounds)
        assert list(report["tx_ratio"][sink]) == ["vs_sendto", "vs_sendmmsg"]
        assert all(f["min"] > 0 for f in report["tx_dps"][sink].values())
    assert [t["key"] for t in report["targets"]] == ["tx_ratio.xdp.vs_sendto"] * 2
    assert [t["kind"] for t in report["targets"]] == ["target", "goal"]


def test_every_run_is_accounted_for_at_dut0(report):
    for sink in tx_bench.SINKS:
        last = report["tx_last_round"][sink]
        assert sorted(last["order"]) == sorted(tx_bench.SENDERS)
        for name, run in last["runs"].items():
            assert run["submitted"] == QUICK_DATAGRAMS, name
            assert run["arrived"] + run["lost"] == run["submitted"], name
            assert run["arrived"] > 0 and run["cpu"]["busy"] > 0, name
        tally = last["runs"]["tokensender"]["tally"]
        assert tally["submitted"] == tally["completed"] == QUICK_DATAGRAMS
        assert last["runs"]["sendmmsg"]["calls"] >= QUICK_DATAGRAMS // tx_bench.MMSG_BATCH
    # Every datagram that reached the AF_XDP sink, but the first chunks' worth
    # it took, was dropped at the socket: it did no more than it says.
    xdp = report["tx_sinks"]["xdp"]
    assert xdp["dropped_at_socket"] == xdp["arrived"] - tx_bench.SINK_FRAMES
    assert report["tx_sinks"]["udp"]["dropped_at_socket"] is None


def test_the_text_report_shows_both_sinks(cli):
    proc = cli("bench", "--section", "tx", "--quick", "--rounds", "1",
               "--tx-datagrams", "2000")
    assert proc.returncode == 0, proc.stderr
    assert "1. Sending, datagrams/s counted at dut0 (2,000 per sender" in proc.stdout
    assert proc.stdout.count("TokenSender / sendto") == 2
    assert "target sending, datagrams/s at the receiver" in proc.stdout
