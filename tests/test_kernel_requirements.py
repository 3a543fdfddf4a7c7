# SPDX-License-Identifier: Apache-2.0
"""The parser build each kernel gets (docs/spec.md §1.7). Where the kernel
lacks bpf_xdp_load_bytes (Linux 5.18; Debian 11's 5.10, Ubuntu 22.04's
5.15), the loader builds the direct parser: a datagram whose walk reaches a
frame header past the direct-read window is passed unjudged and counted as
beyond_window, and attach, status and stats --json say which parser runs.

The direct parser's behaviour is shown twice: on a kernel without the
helper, as it is (vagrant/vm boots Debian 11's 5.10 for it:
`bash vagrant/vm/run.sh --kernel 5.10 -- bash vagrant/provision.sh test
tests/test_kernel_requirements.py`), and on a kernel with it, built on
purpose (only the probe's answer is replaced; program, packets and counters
are real), so CI's kernels keep it working too."""

import json

import pytest

from pyxdp.lab import traffic
from pyxdp.lab import veth_lab as lab_mod
from pyxdp.proto import counters, frames, judge
from pyxdp.xdp import loader, parsers
from support.tx_helpers import UdpReceiver
from support.xdp_helpers import flat_counters

pytestmark = [pytest.mark.root, pytest.mark.kernel]

SEEN = {
    parsers.FULL: "full (bpf_xdp_load_bytes)",
    parsers.DIRECT: f"direct: no bpf_xdp_load_bytes (5.18), headers past {judge.DIRECT_MAX} B "
                    "passed unjudged (beyond_window)",
}


def _json(cli, *args) -> dict:
    return json.loads(cli(*args, "--json", check=True).stdout)


@pytest.mark.smoke
@pytest.mark.capability("xdp_parser")
def test_attach_status_and_stats_name_the_parser_this_kernel_gets(cli, lab, record_property):
    variant = parsers.for_this_kernel()
    where = ("--netns", lab.dut.netns)
    text = cli("attach", lab.dut.ifname, *where, check=True).stdout.splitlines()
    notes = [line for line in text if "bpf_xdp_load_bytes" in line]
    if variant == parsers.DIRECT:
        assert notes == [f"note: {parsers.note(parsers.DIRECT)}"], text
    else:
        assert notes == [], text
    attached = _json(cli, "attach", lab.dut.ifname, *where)  # an upgrade, same build
    (row,) = [r for r in _json(cli, "status", *where)["interfaces"] if r["interface"] == lab.dut.ifname]
    snap = _json(cli, "stats", lab.dut.ifname, *where)
    assert attached["parser"] == row["parser"] == snap["parser"] == variant
    assert row["program_name"] == parsers.PROGRAM_NAMES[variant]
    assert f" {variant} parser" in cli("stats", lab.dut.ifname, *where, check=True).stdout
    record_property("seen", SEEN[variant])


def test_status_reads_the_parser_from_the_attached_program(cli, lab, monkeypatch):
    """The direct build attached on a kernel that would build the full one:
    status and stats, fresh processes, report what is attached."""
    if parsers.for_this_kernel() == parsers.DIRECT:
        pytest.skip("this kernel builds only the direct parser: nothing to tell apart")
    monkeypatch.setattr(parsers, "for_this_kernel", lambda: parsers.DIRECT)
    assert loader.attach(lab.dut.ifname, netns=lab.dut.netns).parser == parsers.DIRECT
    where = ("--netns", lab.dut.netns)
    (row,) = [r for r in _json(cli, "status", *where)["interfaces"] if r["interface"] == lab.dut.ifname]
    assert row["parser"] == _json(cli, "stats", lab.dut.ifname, *where)["parser"] == parsers.DIRECT


BIG = frames.encode(frames.FrameType.TOKEN, b"x" * 17000)  # the 2nd header lies past the window
PAYLOADS = [
    BIG + frames.encode(frames.FrameType.DONE, "{}"),          # valid: beyond_window
    BIG + frames.encode(frames.FrameType.TOKEN, "y") * 3,      # valid, 4 frames: beyond_window
    BIG + frames.HEADER.pack(0, 0x42),                         # unknown type far in: beyond_window
    BIG + frames.HEADER.pack(99, frames.FrameType.TOKEN),      # truncated far in: beyond_window
    BIG + b"\x00\x00",                                         # short header far in: judged by its offset
    frames.encode(frames.FrameType.TOKEN, b"z" * 17000),       # one frame, valid: judged
    frames.HEADER.pack(17000, 0x42) + b"z" * 17000,            # unknown type at the start: judged
]


def _direct_parser_on_big_skb_datagrams(record_property=None):
    """Mirrors tests/test_xdp_replay.py's big skb-mode test, which the full
    parser passes with every datagram judged."""
    with lab_mod.Lab(mtu=20000) as lab:
        result = loader.attach(lab.dut.ifname, netns=lab.dut.netns)  # policy drop
        assert result.mode == "skb" and result.parser == parsers.DIRECT
        receiver = UdpReceiver(lab.dut.netns, lab.dut.ipv4, frames.DEFAULT_PORT)
        try:
            packets = [traffic.udp_packet(lab, p, sport=43000 + i) for i, p in enumerate(PAYLOADS)]
            traffic.send(lab, packets)
            arrived = sorted(data for data, _ in receiver.drain(expect=5))
        finally:
            receiver.close()
        from support.cli_runner import run_cli

        got = flat_counters(run_cli, lab)
    assert got == traffic.expected_counters(packets, direct=True)
    assert got["beyond_window"] == 4 and got["token_datagrams"] == 1
    assert counters.nest(got)["malformed"] == {
        "short_header": 1, "truncated": 0, "unknown_type": 1, "too_many_frames": 0,
        "bad_checksum": 0}
    assert got["malformed_dropped"] == 2
    # Passed whole, under policy drop: the kernel's UDP socket has them.
    assert arrived == sorted(PAYLOADS[:4] + PAYLOADS[5:6])
    if record_property:
        record_property("seen", SEEN[parsers.DIRECT])


@pytest.mark.capability("xdp_parser")
def test_without_the_helper_big_skb_datagrams_are_passed_and_counted(record_property):
    if parsers.for_this_kernel() == parsers.FULL:
        pytest.skip("this kernel has bpf_xdp_load_bytes: the full parser judges every header "
                    "(tests/test_xdp_replay.py)")
    _direct_parser_on_big_skb_datagrams(record_property)


def test_the_direct_parser_built_on_purpose_passes_and_counts(monkeypatch):
    if parsers.for_this_kernel() == parsers.DIRECT:
        pytest.skip("this kernel builds the direct parser itself (the test above)")
    monkeypatch.setattr(parsers, "for_this_kernel", lambda: parsers.DIRECT)
    _direct_parser_on_big_skb_datagrams()
