# SPDX-License-Identifier: Apache-2.0
"""`zerolayer bench --pair` on a real driver: the VM rig's virtio-net pair 0
(vagrant/vm/run.sh --nic-pairs), the zerocopy section measuring zero-copy
against copy where the kernel's virtio_net has it (6.13+), and saying why
not before; the latency section's paths there, busy polling included. They
run and report; what they measure is the bench's business. Not in the
smoke selection: under TCG each adds a compile and minutes."""

import json
import subprocess

import pytest

from pyxdp.bench.latency import PATHS
from support import nic_lab
from support.cli_runner import ZEROLAYER

pytestmark = [pytest.mark.root, pytest.mark.kernel]


def bench_on_the_pair(section: str, timeout: int) -> dict:
    """SECTION's quick run of one round on pair 0, its report; the pair is
    given back under its names."""
    nic_lab.require(1)
    dut, peer = nic_lab.find(nic_lab.mac(0, 1)), nic_lab.find(nic_lab.mac(0, 2))
    proc = subprocess.run([ZEROLAYER, "bench", "--section", section, "--quick", "--rounds", "1",
                           "--pair", f"{dut},{peer}", "--json"],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["machine"]["lab"]["drivers"] == {"dut": "virtio_net", "peer": "virtio_net"}
    assert nic_lab.find(nic_lab.mac(0, 1)) == dut and nic_lab.find(nic_lab.mac(0, 2)) == peer
    return report


def test_the_zerocopy_section_runs_on_the_nic_pair_and_gives_it_back():
    z = bench_on_the_pair("zerocopy", 900)["zerocopy"]
    if nic_lab.zerocopy_expected():
        assert z["skipped"] is None and z["mode_mismatch"] == []
        for direction in ("rx", "tx"):
            assert z["ratio"][direction]["rounds"] == 1
            assert all(z["rate"][direction][mode]["median"] > 0 for mode in ("zerocopy", "copy"))
    else:
        assert "(virtio_net)" in z["skipped"] and "zero-copy" in z["skipped"]


def test_the_latency_section_runs_on_the_nic_pair_and_says_what_busy_polling_did():
    """Every path and load on virtio_net, every frame accounted for; the
    busy-polling AF_XDP socket has a NAPI id where the kernel ties it to
    its queue's NAPI context (virtio_net links them), and then the packets
    the kernel took in by busy polling are counted, or a note says none
    were (the interrupt came first: no profile defers it); without one, a
    note says why."""
    report = bench_on_the_pair("latency", 1800)
    runs = report["latency_runs"]
    assert sorted({r["path"] for r in runs}) == sorted(PATHS)
    for run in runs:
        assert run["lost"] == run["sent"] - run["received"] >= 0
    busy = [r for r in runs if r["path"] == "af_xdp_busy_poll"]
    napi_id = busy[0]["consumer"]["socket"]["busy_poll"]["napi_id"]
    if napi_id:
        assert sum(r["busy_poll_rx_packets"] for r in busy) > 0 or \
            any(n.startswith("af_xdp_busy_poll: the kernel received no frame by busy polling")
                for n in report["latency_notes"]), report["latency_notes"]
    else:
        assert any("NAPI" in n for n in report["latency_notes"]), report["latency_notes"]
