# SPDX-License-Identifier: Apache-2.0
"""attach / upgrade / detach on real veth pairs, through the CLI as a user
runs it: modes, foreign programs, in-place upgrade, pins, fresh processes."""

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from pyxdp.kernel import bpfsys
from pyxdp.lab import traffic
from pyxdp.proto import frames
from pyxdp.xdp import netlink, pins
from support.xdp_helpers import (
    flat_counters,
    live_generator,
    load_foreign,
    one_line_error,
    rx_packets,
    stats,
    xdp_state,
    zerolayer_prog_id,
)

pytestmark = pytest.mark.root


def attach(cli, lab, *args, ifname=None):
    proc = cli("attach", ifname or lab.dut.ifname, "--netns", lab.dut.netns, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.kernel
@pytest.mark.smoke
@pytest.mark.capability("xdp_native")
def test_auto_mode_on_veth_is_native_and_reported(cli, lab, record_property):
    result = attach(cli, lab)
    record_property("seen", f"{result['mode']} on veth")
    assert result["action"] == "attached"
    assert result["mode"] == "native" == xdp_state(lab).mode
    assert result["program_id"] == zerolayer_prog_id(lab)
    assert result["ports"] == [frames.DEFAULT_PORT] and result["on_malformed"] == "drop"
    assert result["flow_tracking"] is False, "per-flow tracking is opt-in"
    assert result["forwarding"] is False and result["forward_notes"] == [], "so is forwarding"
    assert os.path.isdir(pins.pin_dir(lab.dut.ifname, lab.dut.netns))


@pytest.mark.kernel
@pytest.mark.smoke
@pytest.mark.capability("xdp_skb")
def test_auto_mode_falls_back_to_skb_and_says_why(cli, lab, record_property):
    # lo has no native XDP support: auto must land in skb mode and say so
    result = attach(cli, lab, ifname="lo")
    record_property("seen", f"{result['mode']} on lo (auto fallback)")
    assert result["mode"] == "skb" == xdp_state(lab, "lo").mode
    assert "native mode unavailable" in result["note"]
    assert cli("detach", "lo", "--netns", lab.dut.netns).returncode == 0


def test_native_mode_where_unsupported_is_one_line(cli, lab):
    line = one_line_error(cli("attach", "lo", "--netns", lab.dut.netns, "--mode", "native"))
    assert "--mode skb" in line
    log = re.search(r"\(log: (\S+)\)", line)
    assert log, "the line names the log it kept"
    os.unlink(log.group(1))
    assert xdp_state(lab, "lo").prog_id is None
    assert not os.path.exists(pins.pin_dir("lo", lab.dut.netns)), "a failed attach left pins"


@pytest.mark.kernel
def test_foreign_program_is_refused_and_kept(cli, lab, tmp_path):
    bpf, fd = load_foreign(tmp_path)
    state = xdp_state(lab)
    netlink.set_program(state.ifindex, fd, "native", netns=lab.dut.netns)
    foreign_id = xdp_state(lab).prog_id

    line = one_line_error(cli("attach", lab.dut.ifname, "--netns", lab.dut.netns))
    assert "foreign_xdp" in line and "--replace" in line
    assert xdp_state(lab).prog_id == foreign_id
    one_line_error(cli("detach", lab.dut.ifname, "--netns", lab.dut.netns))
    assert xdp_state(lab).prog_id == foreign_id, "detach touched a foreign program"

    replaced = attach(cli, lab, "--replace")
    assert replaced["action"] == "replaced" and replaced["program_id"] != foreign_id
    assert cli("detach", lab.dut.ifname, "--netns", lab.dut.netns).returncode == 0
    assert xdp_state(lab).prog_id is None


@pytest.mark.kernel
def test_upgrade_in_place_never_leaves_the_interface_bare(cli, lab):
    """Traffic runs while the program is upgraded. Every packet dut0
    receives must be counted by one program or the other (they share the
    pinned counters): a moment without a program would let packets through
    uncounted. (What dut0 receives, not what was sent: on a slow machine the
    sender's frames can overflow veth's ring before they reach dut0.)"""
    first = attach(cli, lab)
    received_before = rx_packets(lab)
    packet = bytes(traffic.udp_packet(lab, frames.encode(frames.FrameType.TOKEN, "t"), sport=40000))
    gen = live_generator(lab.peer.ifname, lab.peer.netns)
    sent, stop = [0], threading.Event()
    seen_ids, bare = set(), []

    def load():
        while not stop.is_set():
            sent[0] += gen.send(packet, 2000)

    def watch():
        while not stop.is_set():
            if xdp_state(lab).prog_id is None:
                bare.append(time.monotonic())
            seen_ids.add(zerolayer_prog_id(lab))

    threads = [threading.Thread(target=load), threading.Thread(target=watch)]
    for t in threads:
        t.start()
    try:
        second = attach(cli, lab)
    finally:
        time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join()
    time.sleep(0.1)
    assert second["action"] == "upgraded"
    assert second["program_id"] != first["program_id"]
    assert {first["program_id"], second["program_id"]} <= seen_ids
    assert not bare, "netlink saw the interface without a program"
    counted = flat_counters(cli, lab)
    received = rx_packets(lab) - received_before
    assert 0 < received <= sent[0]
    assert counted["packets"] == received, (counted["packets"], received, sent[0])
    assert counted["token_datagrams"] == received


def test_upgrade_keeps_runtime_config_unless_given(cli, lab):
    first = attach(cli, lab, "--port", "10000", "--port", "9977", "--on-malformed", "pass",
                   "--flows", "on", "--forward", "on")
    egress_id = _pinned_map_id(first["pin_dir"], "egress")
    kept = attach(cli, lab)
    assert kept["ports"] == [9977, 10000] and kept["on_malformed"] == "pass"
    assert kept["flow_tracking"] is True and kept["forwarding"] is True
    assert _pinned_map_id(first["pin_dir"], "egress") == egress_id, "the egress map was made anew"
    changed = attach(cli, lab, "--port", "7000", "--flows", "off", "--forward", "off")
    assert changed["ports"] == [7000] and changed["on_malformed"] == "pass"
    assert changed["flow_tracking"] is False and changed["forwarding"] is False


def _pinned_map_id(pin_dir: str, name: str) -> int:
    fd = bpfsys.obj_get(os.path.join(pin_dir, name))
    try:
        return bpfsys.map_info(fd).id
    finally:
        os.close(fd)


def test_mode_change_on_upgrade_is_refused(cli, lab):
    attach(cli, lab, "--mode", "native")
    line = one_line_error(cli("attach", lab.dut.ifname, "--netns", lab.dut.netns, "--mode", "skb"))
    assert "detach first" in line
    assert xdp_state(lab).mode == "native"


@pytest.mark.kernel
def test_detach_removes_program_and_pins(cli, lab):
    attach(cli, lab)
    proc = cli("detach", lab.dut.ifname, "--netns", lab.dut.netns, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["action"] == "detached"
    assert xdp_state(lab).prog_id is None
    assert not os.path.exists(pins.netns_dir(lab.dut.netns))
    assert "not attached" in one_line_error(cli("detach", lab.dut.ifname, "--netns", lab.dut.netns))


def _prog_ids() -> set[int]:
    out = subprocess.run(["bpftool", "prog", "list", "--json"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"] for p in json.loads(out)}


@pytest.mark.kernel
def test_stats_and_status_from_a_fresh_process_load_nothing(cli, lab):
    attached = attach(cli, lab)
    traffic.send(lab, traffic.mixed_traffic(lab))
    before = _prog_ids()
    snap = stats(cli, lab)
    status = json.loads(cli("status", "--netns", lab.dut.netns, "--json", check=True).stdout)
    assert _prog_ids() == before, "stats/status loaded a program"
    assert snap["program_id"] == attached["program_id"] and snap["mode"] == "native"
    assert snap["counters"]["packets"] > 0
    (row,) = [r for r in status["interfaces"] if r["interface"] == lab.dut.ifname]
    assert row["owner"] == "zerolayer" and row["program_id"] == attached["program_id"]
    assert row["ports"] == [frames.DEFAULT_PORT]


def test_stats_of_an_interface_without_zerolayer(cli, lab):
    assert "not attached" in one_line_error(cli("stats", lab.dut.ifname, "--netns", lab.dut.netns))


def test_stale_pins_are_reported_and_reclaimed(cli, lab):
    attach(cli, lab)
    # someone removes our program with another tool
    subprocess.run(["ip", "-n", lab.dut.netns, "link", "set", "dev", lab.dut.ifname, "xdp", "off"],
                   check=True)
    status = json.loads(cli("status", lab.dut.ifname, "--netns", lab.dut.netns, "--json").stdout)
    assert status["interfaces"][0]["stale_pins"] is True
    assert stats(cli, lab)["attached"] is False
    fresh = attach(cli, lab)
    assert fresh["action"] == "attached"
    assert flat_counters(cli, lab)["packets"] == 0, "stale counters were reused"


@pytest.mark.kernel
def test_config_changes_ports_without_reloading(cli, lab):
    first = attach(cli, lab)
    proc = cli("config", lab.dut.ifname, "--netns", lab.dut.netns, "--port", "10000",
               "--flows", "on", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout) | {"netns": None} == {
        "interface": lab.dut.ifname, "netns": None, "ports": [10000], "on_malformed": "drop",
        "flow_tracking": True, "forwarding": False, "egress": [lab.dut.ifname],
        "forward_notes": []}
    assert zerolayer_prog_id(lab) == first["program_id"]
    pkt = traffic.udp_packet(lab, frames.encode(frames.FrameType.TOKEN, "x"), sport=1, dport=10000)
    traffic.send(lab, [pkt])
    time.sleep(0.1)
    assert flat_counters(cli, lab)["token_datagrams"] == 1


def test_stats_watch_prints_rates_until_interrupted(lab):
    from pyxdp.xdp import loader
    from support.cli_runner import ZEROLAYER

    loader.attach(lab.dut.ifname, netns=lab.dut.netns)
    packets = traffic.mixed_traffic(lab)
    proc = subprocess.Popen([ZEROLAYER, "stats", lab.dut.ifname, "--netns", lab.dut.netns,
                             "--watch", "0.2", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = [json.loads(proc.stdout.readline())]  # the baseline is taken: now send
        traffic.send(lab, packets)
        while lines[-1]["counters"]["packets"] < len(packets):
            lines.append(json.loads(proc.stdout.readline()))
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and err == ""
    assert all({"rates", "interval_s", "counters"} <= set(line) for line in lines)
    # per-interval rates integrate back to the totals
    assert sum(line["rates"]["packets"] * line["interval_s"] for line in lines) == pytest.approx(
        len(packets), abs=1)
