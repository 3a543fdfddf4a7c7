# SPDX-License-Identifier: Apache-2.0
"""zerolayer beside the programs xdp-tools loads through libxdp's dispatcher,
on real veth pairs: xdp-filter in either order, both doing their work,
each removable alone; an upgrade in place inside the dispatcher; the
priority; zerolayer and xdp-loader changing one interface at once.

xdp-tools run in the lab's network namespace with the host's bpffs (their
state and libxdp's live there), as `nsenter --net` gives them. A kernel that
refuses libxdp's dispatcher (it refuses freplace programs: some locked-down
kernels do, and xdp-loader then loads one program alone too) makes each test
skip with that reason, which the kernel table shows."""

import json
import re
import subprocess
import threading

import pytest

from pyxdp.lab import traffic
from pyxdp.proto import frames
from pyxdp.xdp import dispatcher, parsers
from support.xdp_helpers import flat_counters, one_line_error, xdp_state

pytestmark = [pytest.mark.root, pytest.mark.kernel]

FILTERED = 7777  # the UDP port xdp-filter drops
XDPFILT = "xdpfilt_alw_all"  # the program xdp-filter loads by default, at priority 10


def zl() -> str:
    """zerolayer's program, as this kernel's parser build names it (spec §1.7)."""
    return parsers.PROGRAM_NAMES[parsers.for_this_kernel()]


def tool(lab, *args, check=True) -> str:
    """An xdp-tools command in the lab's dut namespace."""
    proc = subprocess.run(["nsenter", f"--net=/run/netns/{lab.dut.netns}", *args],
                          capture_output=True, text=True, timeout=60)
    if check:
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout + proc.stderr


def attach(cli, lab, *args) -> dict:
    proc = cli("attach", lab.dut.ifname, "--netns", lab.dut.netns, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def members(lab) -> list[str]:
    """The dispatcher's programs on dut0, in the order they run."""
    found = dispatcher.read(xdp_state(lab).ifindex, lab.dut.netns)
    return [m.name for m in found.members] if found else []


def filter_hits(lab) -> int:
    """xdp-filter's hit counter of the filtered port."""
    found = re.search(rf"^\s*{FILTERED}\s+\S+\s+(\d+)", tool(lab, "xdp-filter", "status"), re.M)
    assert found, "xdp-filter shows no rule for the filtered port"
    return int(found.group(1))


def send_both(lab, count: int = 5) -> None:
    """COUNT token datagrams to zerolayer's port and COUNT to the filtered one."""
    token = frames.encode(frames.FrameType.TOKEN, "t")
    packets = [traffic.udp_packet(lab, token, sport=40000 + i) for i in range(count)]
    packets += [traffic.udp_packet(lab, b"not for us", sport=41000 + i, dport=FILTERED)
                for i in range(count)]
    traffic.send(lab, packets)


@pytest.fixture
def filtered(lab, cli):
    """A lab whose kernel runs libxdp's dispatcher (else a skip saying why),
    with xdp-filter's rule for FILTERED; whatever runs on dut0 is removed
    after the test, xdp-filter's program and rule too."""
    probe = attach(cli, lab)
    cli("detach", lab.dut.ifname, "--netns", lab.dut.netns, check=True)
    if probe["dispatcher"] is None:
        pytest.skip(probe["note"])
    try:
        yield lab
    finally:
        cli("detach", lab.dut.ifname, "--netns", lab.dut.netns)
        tool(lab, "xdp-filter", "unload", lab.dut.ifname, check=False)
        tool(lab, "xdp-filter", "port", "--remove", str(FILTERED), check=False)


def load_filter(lab) -> None:
    tool(lab, "xdp-filter", "load", lab.dut.ifname, "--mode", "native")
    tool(lab, "xdp-filter", "port", str(FILTERED))


@pytest.mark.smoke
@pytest.mark.capability("dispatcher")
def test_zerolayer_first_then_xdp_filter_both_work_and_leave_alone(cli, filtered,
                                                                   record_property):
    lab = filtered
    first = attach(cli, lab)
    assert [(m["name"], m["priority"]) for m in first["dispatcher"]] == [(zl(), 20)]
    load_filter(lab)
    assert members(lab) == [XDPFILT, zl()], "the filter (10) runs first"
    status = tool(lab, "xdp-loader", "status", lab.dut.ifname)
    assert "xdp_dispatcher" in status and zl() in status and XDPFILT in status

    send_both(lab)
    assert flat_counters(cli, lab)["token_datagrams"] == 5
    assert filter_hits(lab) == 5, "zerolayer passed on what is not its own"

    # zerolayer leaves: xdp-filter stays, and still drops
    cli("detach", lab.dut.ifname, "--netns", lab.dut.netns, check=True)
    assert members(lab) == [XDPFILT]
    send_both(lab)
    assert filter_hits(lab) == 10
    line = one_line_error(cli("detach", lab.dut.ifname, "--netns", lab.dut.netns))
    assert f"libxdp's dispatcher there runs {XDPFILT}, none of them zerolayer's" in line
    record_property("seen", "beside xdp-filter, either order")


@pytest.mark.smoke
@pytest.mark.capability("dispatcher")
def test_xdp_filter_first_then_zerolayer_both_work_and_leave_alone(cli, filtered,
                                                                   record_property):
    lab = filtered
    load_filter(lab)
    result = attach(cli, lab)
    assert result["action"] == "attached", "joining replaces nothing"
    assert [(m["name"], m["owner"]) for m in result["dispatcher"]] == [
        (XDPFILT, "foreign"), (zl(), "zerolayer")]

    send_both(lab)
    assert flat_counters(cli, lab)["token_datagrams"] == 5
    assert filter_hits(lab) == 5

    # xdp-filter leaves: zerolayer stays, and still counts
    tool(lab, "xdp-filter", "unload", lab.dut.ifname)
    assert members(lab) == [zl()]
    send_both(lab)
    assert flat_counters(cli, lab)["token_datagrams"] == 10
    record_property("seen", "beside xdp-filter, either order")


@pytest.mark.smoke
def test_upgrade_in_place_inside_the_dispatcher(cli, filtered):
    lab = filtered
    load_filter(lab)
    first = attach(cli, lab)
    send_both(lab)
    second = attach(cli, lab, "--port", str(frames.DEFAULT_PORT), "--port", "9978")
    assert second["action"] == "upgraded" and second["program_id"] != first["program_id"]
    assert members(lab) == [XDPFILT, zl()], "one zerolayer program, the filter kept"
    assert second["ports"] == [frames.DEFAULT_PORT, 9978] and second["priority"] == 20
    send_both(lab)
    assert flat_counters(cli, lab)["token_datagrams"] == 10, "the counters carried over"
    assert filter_hits(lab) == 10


def test_priority_places_zerolayer_before_the_filter(cli, filtered):
    lab = filtered
    load_filter(lab)
    result = attach(cli, lab, "--priority", "5")
    assert [(m["name"], m["priority"]) for m in result["dispatcher"]] == [
        (zl(), 5), (XDPFILT, 10)]
    # an upgrade keeps it unless told
    assert attach(cli, lab)["priority"] == 5
    status = cli("status", lab.dut.ifname, "--netns", lab.dut.netns, check=True).stdout
    assert "libxdp's dispatcher runs, in this order: " in status
    assert status.index(f"{zl()} (id") < status.index(XDPFILT)
    # first, it still passes on what is not its own
    send_both(lab)
    assert flat_counters(cli, lab)["token_datagrams"] == 5
    assert filter_hits(lab) == 5


def test_zerolayer_and_xdp_loader_at_once(cli, filtered):
    """libxdp's lock serialises the two: both end up in the dispatcher."""
    lab = filtered
    objects = "/usr/lib/x86_64-linux-gnu/bpf"
    done: dict = {}

    def ours():
        done["zerolayer"] = cli("attach", lab.dut.ifname, "--netns", lab.dut.netns)

    t = threading.Thread(target=ours)
    t.start()
    done["xdp-loader"] = tool(lab, "xdp-loader", "load", "--mode", "native", lab.dut.ifname,
                              f"{objects}/{XDPFILT}.o", check=False)
    t.join(60)
    assert done["zerolayer"].returncode == 0, done["zerolayer"].stderr
    assert sorted(members(lab)) == sorted([zl(), XDPFILT]), done["xdp-loader"]
    tool(lab, "xdp-loader", "unload", lab.dut.ifname, "--id",
         str(next(m.id for m in dispatcher.read(xdp_state(lab).ifindex, lab.dut.netns).members
                  if m.name == XDPFILT)))
    assert members(lab) == [zl()]


@pytest.mark.smoke
def test_only_the_generation_the_config_names_acts():
    """The guard that lets an upgrade run two programs at once (spec §6.4),
    in BPF_PROG_TEST_RUN: a program of another generation passes a token
    datagram on uncounted; once the config names it, it judges and counts."""
    from pyxdp.kernel import bpfsys
    from pyxdp.xdp import compiler
    from pyxdp.xdp.maps import ZerolayerMaps
    from support.packets import build, token_frames

    packet = build(token_frames(("token", "hi")))
    loaded = compiler.load_token(generation=1)
    try:
        with ZerolayerMaps.from_fds(loaded.map_fds) as maps:
            maps.set_ports([frames.DEFAULT_PORT])
            assert maps.generation() == 0
            idle = bpfsys.prog_test_run(loaded.prog_fd, packet)
            assert idle.retval == 2  # XDP_PASS
            assert maps.read_counters()["packets"] == 0
            maps.set_generation(1)
            assert maps.generation() == 1 and maps.ports() == [frames.DEFAULT_PORT]
            bpfsys.prog_test_run(loaded.prog_fd, packet)
            assert maps.read_counters()["token_datagrams"] == 1
    finally:
        loaded.close()
