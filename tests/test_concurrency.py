# SPDX-License-Identifier: Apache-2.0
"""Concurrent attach, upgrade, config and detach of one interface, as
automation runs them: real `zerolayer` processes, 2 to 8 at once, with
token traffic flowing. Every command must succeed or fail in one line,
and afterwards the state must be one command's whole: one program, its
pins complete, a port set some command asked for (never a union, never
empty), and no datagram to a port every set holds counted as anything but
a token datagram.

ZEROLAYER_CONCURRENCY_ROUNDS=100 runs 100 rounds (default 1: the suite's
time matters); each round widens the contention, from 2 to 8 commands.
"""

import json
import os
import subprocess
import threading
import time

import pytest

from pyxdp.kernel import bpfsys
from pyxdp.lab import traffic
from pyxdp.proto import frames
from pyxdp.xdp import iface_lock, pins
from pyxdp.xdp.maps import ZerolayerMaps
from support.cli_runner import ZEROLAYER
from support.xdp_helpers import (
    flat_counters,
    live_generator,
    one_line_error,
    rx_packets,
    xdp_state,
    zerolayer_prog_id,
)

pytestmark = [pytest.mark.root, pytest.mark.kernel]

ROUNDS = int(os.environ.get("ZEROLAYER_CONCURRENCY_ROUNDS", "1"))
STEADY = frames.DEFAULT_PORT  # in every set below: its traffic must always be tokens
XDP_DROP = 1
WAIT = "300"  # --wait: eight compiles in a row on a busy 2-CPU host still fit


def port_set(n: int) -> list[int]:
    """Set N: the steady port and 30 of its own (31 ports, as in issue 21);
    400 distinct sets, so every port stays below 65536 in any round."""
    base = 20000 + 100 * (n % 400)
    return sorted({STEADY, *range(base, base + 30)})


def start(lab, *args) -> subprocess.Popen:
    return subprocess.Popen([ZEROLAYER, *args, lab.dut.ifname, "--netns", lab.dut.netns,
                             "--wait", WAIT, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs: list[subprocess.Popen]) -> list[tuple[int, dict | None, str]]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        out.append((p.returncode, json.loads(stdout) if p.returncode == 0 else None, stderr))
    return out


def ports_flag(n: int) -> list[str]:
    return [a for p in port_set(n) for a in ("--port", str(p))]


def status_row(lab) -> dict:
    proc = subprocess.run([ZEROLAYER, "status", lab.dut.ifname, "--netns", lab.dut.netns,
                           "--json"], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)["interfaces"][0]


def assert_one_whole_attachment(lab, sets: list[list[int]]) -> dict:
    row = status_row(lab)
    assert row["owner"] == "zerolayer", row
    assert row["ports"] in sets, f"a set no command asked for: {row['ports']}"
    pin_dir = pins.pin_dir(lab.dut.ifname, lab.dut.netns)
    assert sorted(os.listdir(pin_dir)) == sorted([pins.PROG, *pins.MAPS]), os.listdir(pin_dir)
    out = subprocess.run(["bpftool", "prog", "show", "pinned", os.path.join(pin_dir, pins.PROG),
                          "--json"], capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["id"] == row["program_id"] == zerolayer_prog_id(lab)
    return row


class Traffic:
    """Token datagrams to the steady port from peer0, until stopped."""

    def __init__(self, lab):
        payload = frames.encode(frames.FrameType.TOKEN, "t")
        self._packet = bytes(traffic.udp_packet(lab, payload, sport=40000, dport=STEADY))
        self._gen = live_generator(lab.peer.ifname, lab.peer.netns)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self.sent = 0

    def _run(self):
        while not self._stop.is_set():
            self.sent += self._gen.send(self._packet, 2000)  # ~60,000/s here

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class Probe:
    """The attached program run on a malformed datagram to the steady port,
    back to back (BPF_PROG_TEST_RUN, with the pinned maps): while the port
    is in the set in effect the verdict is XDP_DROP (the malformed policy);
    a set without it makes the datagram `other`, XDP_PASS. Between runs, the
    set as `status` reads it must be one a command asked for."""

    def __init__(self, lab, allowed: list[list[int]]):
        self._pin_dir = pins.pin_dir(lab.dut.ifname, lab.dut.netns)
        payload = traffic.malformed_payloads()["unknown_type"]
        self._packet = bytes(traffic.udp_packet(lab, payload, sport=40001, dport=STEADY))
        self._allowed = allowed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self.runs, self.passed, self.foreign_sets = 0, 0, []

    def _run(self):
        prog_fd = bpfsys.obj_get(os.path.join(self._pin_dir, pins.PROG))
        try:
            with ZerolayerMaps.open_pinned(self._pin_dir) as maps:
                while not self._stop.is_set():
                    for _ in range(20):
                        if bpfsys.prog_test_run(prog_fd, self._packet).retval != XDP_DROP:
                            self.passed += 1
                    self.runs += 20
                    seen = maps.ports()
                    if seen not in self._allowed:
                        self.foreign_sets.append(seen)
                    time.sleep(0.001)  # leave the CPUs to the commands
        finally:
            os.close(prog_fd)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def first_attaches(lab, round_no: int) -> None:
    """2-3 first attaches at once: one attaches, the others upgrade after it."""
    width = 2 + round_no % 2
    sets = [port_set(round_no * 10 + i) for i in range(width)]
    results = finish([start(lab, "attach", *ports_flag(round_no * 10 + i)) for i in range(width)])
    assert all(rc == 0 for rc, _, _ in results), [err for _, _, err in results]
    actions = sorted(r["action"] for _, r, _ in results)
    assert actions == ["attached"] + ["upgraded"] * (width - 1), actions
    for (_, r, _), wanted in zip(results, sets):
        assert r["ports"] == wanted, "a command reported a set it did not make"
    assert_one_whole_attachment(lab, sets)


def changes_under_traffic(cli, lab, round_no: int) -> None:
    """2-8 configs (in every fourth round one of them an upgrade) at once,
    while tokens flow to the steady port."""
    width = 2 + round_no % 7
    ids = [round_no * 10 + 5 + i for i in range(width)]
    allowed = [status_row(lab)["ports"]] + [port_set(n) for n in ids]
    before = flat_counters(cli, lab)
    received_before = rx_packets(lab)
    with Traffic(lab) as flow, Probe(lab, allowed) as probe:
        procs = [start(lab, "attach" if i == 0 and round_no % 4 == 1 else "config", *ports_flag(n))
                 for i, n in enumerate(ids)]
        results = finish(procs)
        time.sleep(0.05)
    time.sleep(0.1)
    assert all(rc == 0 for rc, _, _ in results), [err for _, _, err in results]
    for (_, r, _), n in zip(results, ids):
        assert r["ports"] == port_set(n), "a command reported a set it did not make"
    assert_one_whole_attachment(lab, allowed[1:])
    assert probe.runs > 0 and probe.passed == 0, f"{probe.passed} of {probe.runs} probes saw " \
        "a set without the steady port"
    assert not probe.foreign_sets, f"read a set no command asked for: {probe.foreign_sets[0]}"
    after = flat_counters(cli, lab)
    received = rx_packets(lab) - received_before
    assert received > 0 and flow.sent > 0
    delta = {k: after[k] - before[k] for k in ("packets", "token_datagrams", "other")}
    # Every datagram went to the steady port: one not counted as a token
    # saw a set without it (an empty or half-written one). The probes are
    # malformed datagrams: counted as packets, never as tokens.
    assert delta == {"packets": received + probe.runs, "token_datagrams": received,
                     "other": 0}, (delta, received, probe.runs, flow.sent)


def detaches(lab, round_no: int) -> None:
    """Two detaches and a config at once: one detach wins, the other finds
    nothing; the config runs before (and succeeds) or after (and says so)."""
    procs = [start(lab, "detach"), start(lab, "config", *ports_flag(round_no)), start(lab, "detach")]
    results = finish(procs)
    detached = [r for rc, r, _ in results if rc == 0 and r and r.get("action") == "detached"]
    assert len(detached) == 1, results
    for rc, r, err in results:
        if rc != 0:
            assert rc == 1 and len(err.strip().splitlines()) == 1, err
            assert "not attached" in err, err
        elif "ports" in r:
            assert r["ports"] == port_set(round_no)
    assert xdp_state(lab).prog_id is None, "an orphaned program stayed attached"
    assert not os.path.exists(pins.pin_dir(lab.dut.ifname, lab.dut.netns)), "pins left behind"


@pytest.mark.parametrize("round_no", range(ROUNDS))
def test_concurrent_commands_leave_one_whole_state(cli, lab, round_no):
    first_attaches(lab, round_no)
    changes_under_traffic(cli, lab, round_no)
    detaches(lab, round_no)


def test_a_command_that_cannot_get_the_lock_changes_nothing(cli, lab):
    attach = cli("attach", lab.dut.ifname, "--netns", lab.dut.netns, "--json", check=True)
    program_id = json.loads(attach.stdout)["program_id"]
    with iface_lock.held(lab.dut.ifname, lab.dut.netns):
        for args in (["config", "--port", "7000"], ["detach"], ["attach", "--port", "7000"]):
            line = one_line_error(cli(*args[:1], lab.dut.ifname, "--netns", lab.dut.netns,
                                      *args[1:], "--wait", "0.2"))
            assert f"(pid {os.getpid()}) is changing {lab.dut.ifname}" in line
            assert "nothing was changed" in line and "--wait" in line
    row = status_row(lab)
    assert row["ports"] == [STEADY] and row["program_id"] == program_id
    assert cli("detach", lab.dut.ifname, "--netns", lab.dut.netns).returncode == 0


def test_a_slowed_config_never_shows_a_partial_or_empty_set(cli, lab):
    """The writer slowed down by strace to 20 ms per bpf(2) call, so a set
    written in place would be caught half-written: programs and readers
    must still see only the old set or the new one, whole."""
    old, new = port_set(0), port_set(1)
    cli("attach", lab.dut.ifname, "--netns", lab.dut.netns, *ports_flag(0), check=True)
    with Probe(lab, [old, new]) as probe:
        proc = subprocess.run(
            ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=bpf",
             "-e", "inject=bpf:delay_exit=20000", ZEROLAYER, "config", lab.dut.ifname,
             "--netns", lab.dut.netns, *ports_flag(1), "--json"],
            capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ports"] == new
    assert probe.runs > 0 and probe.passed == 0, f"{probe.passed} of {probe.runs} probes saw " \
        "a set without the steady port"
    assert not probe.foreign_sets, f"read a set no command asked for: {probe.foreign_sets[0]}"
    assert status_row(lab)["ports"] == new
    assert cli("detach", lab.dut.ifname, "--netns", lab.dut.netns).returncode == 0
