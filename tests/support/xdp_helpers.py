# SPDX-License-Identifier: Apache-2.0
"""Small helpers shared by the veth-based XDP tests."""

import json
import subprocess

from pyxdp.proto import counters
from pyxdp.xdp import dispatcher, netlink, parsers

FOREIGN_C = "foreign_xdp.c"


def stats(cli, lab) -> dict:
    proc = cli("stats", lab.dut.ifname, "--netns", lab.dut.netns, "--json", check=True)
    return json.loads(proc.stdout)


def flat_counters(cli, lab) -> dict[str, int]:
    return counters.flatten(stats(cli, lab)["counters"])


def rx_packets(lab) -> int:
    """Packets dut0 received, as the kernel counts them for the device."""
    out = subprocess.run(["ip", "-n", lab.dut.netns, "-j", "-s", "link", "show", "dev", lab.dut.ifname],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["stats64"]["rx"]["packets"]


def xdp_state(lab, ifname=None):
    return netlink.query(ifname or lab.dut.ifname, lab.dut.netns)


def zerolayer_prog_id(lab, ifname=None) -> int | None:
    """The id of zerolayer's program on the interface: the one attached, or
    in libxdp's dispatcher, its own there (named as pyxdp.xdp.parsers names
    it); None when neither runs."""
    state = xdp_state(lab, ifname)
    found = dispatcher.read(state.ifindex, lab.dut.netns) if state.prog_id else None
    if found is None:
        return state.prog_id
    ours = [m.id for m in found.members if parsers.of_program(m.name)]
    return ours[0] if len(ours) == 1 else None


def load_foreign(tmp_path):
    """Another tool's XDP program: it passes everything and is named so.
    Returns what holds it (close() it) and its fd."""
    from pyxdp.xdp import compiler

    src = tmp_path / "bpf"
    src.mkdir(exist_ok=True)
    (src / FOREIGN_C).write_text(
        '#include "zl_object.h"\n'
        'char _license[] SEC("license") = "GPL";\n'
        'SEC("xdp") int foreign_xdp(struct xdp_md *ctx) { return XDP_PASS; }\n'
    )
    loaded = compiler.load(compiler.Build(FOREIGN_C, directory=src), "foreign_xdp")
    return loaded, loaded.prog_fd


def one_line_error(proc) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("zerolayer: ")
    return lines[0]



def live_generator(ifname: str, netns: str | None):
    """The traffic generator on IFNAME, or a skip (with the one-line reason)
    where the kernel has no live-frames test runs (Linux 5.10)."""
    import pytest

    from pyxdp.lab import generator

    if not generator.live_frames():
        pytest.skip(generator.no_live_frames())
    return generator.LiveGenerator(ifname, netns)
