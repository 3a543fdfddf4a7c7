# SPDX-License-Identifier: Apache-2.0
"""`zerolayer top` in a real terminal: a tmux pane runs it, traffic flows,
capture-pane reads the screen, send-keys quits it (q, and Ctrl-C), and the
shell gets its terminal back."""

import json
import os
import shutil
import subprocess
import time

import pytest

from pyxdp.lab import traffic
from pyxdp.xdp import parsers
from support.cli_runner import ZEROLAYER

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)")]


class Pane:
    """A detached tmux session running one command, then reporting its exit."""

    def __init__(self, command: str):
        self.name = f"zl-top-{os.getpid()}-{time.monotonic_ns()}"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "60",
                        f"{command}; echo EXIT=$?; sleep 600"], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, text: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never appeared; the screen:\n{screen}")
            time.sleep(0.2)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.mark.parametrize("quit_key", ["q", "C-c"])
def test_top_shows_rates_and_flows_and_quits_cleanly(attached, quit_key):
    lab = attached
    pane = Pane(f"{ZEROLAYER} top --interval 0.5")
    try:
        pane.wait_for(f"{lab.dut.netns}/{lab.dut.ifname}")
        # Keep traffic flowing over a few refreshes so rates are non-zero.
        for seed in range(3):
            traffic.send(lab, traffic.mixed_traffic(lab, streams=4, seed=seed), inter=0.01)
        screen = pane.wait_for(f"{lab.peer.ipv4}:4000")
        assert "zerolayer top" in screen and "native" in screen
        assert "PARSER" in screen and f" {parsers.for_this_kernel()} " in screen
        assert "top flows by tokens/s" in screen and "token gaps, all flows since attach" in screen
        assert "<1us" in screen  # tokens sharing a datagram
        assert "Traceback" not in screen
        pane.keys(quit_key)
        screen = pane.wait_for("EXIT=")
        assert "EXIT=0" in screen
        # The alternate screen is gone: the shell's own screen is back.
        assert "zerolayer top -" not in screen and "Traceback" not in screen
    finally:
        pane.close()


def test_top_without_a_terminal_says_what_to_use(cli):
    proc = cli("top", stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "zerolayer: top needs a terminal: for scripts use `zerolayer top --json`, "
        "`zerolayer stats IFACE --flows --json` or `zerolayer exporter --once`")


def test_top_json_lines_have_live_rates_and_only_the_namespace_asked(attached):
    lab = attached
    proc = subprocess.Popen([ZEROLAYER, "top", "--json", "--count", "3", "--interval", "1",
                             "--netns", lab.dut.netns],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [json.loads(proc.stdout.readline())]
        # Traffic after the first line: a later interval's rates must show it.
        traffic.send(lab, traffic.mixed_traffic(lab, streams=2), inter=0.01)
        lines += [json.loads(line) for line in proc.stdout]
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(lines) == 3
    for line in lines:
        assert line["interval_s"] >= 0.99  # one --interval at least (measured, not asked)
        (iface,) = line["interfaces"]  # other namespaces' and the host's are left out
        assert (iface["interface"], iface["netns"], iface["attached"]) == (
            lab.dut.ifname, lab.dut.netns, True)
        assert iface["rates"] is not None and iface["flow_tracking"] is True
        assert iface["af_xdp"] == []  # no socket bound: none claimed
    later = [line["interfaces"][0] for line in lines[1:]]
    assert sum(i["rates"]["token_datagrams"] for i in later) > 0
    assert later[-1]["counters"]["token_datagrams"] > 0
    flows_seen = [f for i in later for f in i["flows"]]
    assert flows_seen and all("tokens_per_s" in f and "avg_tokens_per_s" in f
                              for f in flows_seen)


def test_top_netns_and_count_errors(cli):
    proc = cli("top", "--json", "--netns", "zl-no-such-ns")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "network namespace 'zl-no-such-ns' does not exist" in proc.stderr
    assert cli("top", "--count", "1").returncode == 2


def test_top_json_says_each_af_xdp_socket_and_its_mode(attached):
    """veth copies: the socket's mode as the kernel reports it (or, where it
    has no xsk_diag, as the listener read it back), not a claim."""
    from pyxdp.xsk.listen import Listener

    lab = attached
    with Listener(lab.dut.ifname, netns=lab.dut.netns):
        proc = subprocess.run([ZEROLAYER, "top", "--json", "--count", "1", "--interval", "0.25",
                               "--netns", lab.dut.netns], capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 0, proc.stderr
    (iface,) = json.loads(proc.stdout.splitlines()[-1])["interfaces"]
    assert [(s["queue"], s["mode"]) for s in iface["af_xdp"]] == [(0, "copy")]
