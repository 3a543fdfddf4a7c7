# SPDX-License-Identifier: Apache-2.0
"""The `core` section of `zerolayer bench`: the pure and the compiled core
side by side, receive and send, at every batch size, in the JSON, the text
and the plot. Figures are not judged (no wall-clock asserts): only that
each was measured. The section needs no network, but the command, like
every bench, runs as root; the section's own measure runs as anyone."""

import json

import pytest

from pyxdp.bench.core import cost as core_cost
from pyxdp.xsk import core


@pytest.mark.root
def test_the_core_section_reports_both_cores_at_every_size(cli, tmp_path):
    plot = tmp_path / "core.png"
    proc = cli("bench", "--section", "core", "--quick", "--json", "--plot", plot, check=True)
    report = json.loads(proc.stdout)
    assert report["machine"]["cpu_model"]
    assert [k for k in report if k not in ("machine", "quick", "targets", "duration_s",
                                           "plot")] == ["core"]
    c = report["core"]
    assert c["cores"] == ["pure", "compiled"]  # an install with gcc builds the compiled one
    assert c["sizes"] == [16, 256, 1024] and c["frames_per_datagram"] == core_cost.FRAMES
    for name in c["cores"]:
        for path in ("rx", "tx"):
            f = c[name][path]
            assert sorted(f["batch_ns"]) == ["1024", "16", "256"]
            assert all(fig["median"] > 0 and fig["rounds"] == 2 for fig in f["batch_ns"].values())
            assert f["fixed_ns"]["median"] >= 0 and f["per_frame_ns"]["rounds"] == 2
    assert sorted(c["speedup"]) == ["rx", "tx"]
    assert all(fig["median"] > 0 for by in c["speedup"].values() for fig in by.values())
    assert report["targets"] == []
    assert plot.stat().st_size > 0
    text = cli("bench", "--section", "core", "--quick", check=True).stdout
    assert "Per-batch cost of the Python paths" in text
    for row in ("receive  pure", "receive  compiled", "send     pure / compiled"):
        assert row in text, text


def test_each_core_walks_and_publishes_every_frame():
    """The bench's own checks: a core that skipped a frame or a descriptor
    would stop it (RuntimeError), so a batch through each is real work."""
    assert core_cost.cores() == ("pure", "compiled")
    for name in core_cost.cores():
        with core.use(name):
            rx, tx = core_cost.Receiver(), core_cost.Sender()
            for _ in range(3):  # around both rings more than once
                for n in core_cost.SIZES:
                    assert rx.batch_ns(n) > 0 and tx.batch_ns(n) > 0
