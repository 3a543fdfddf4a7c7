# SPDX-License-Identifier: Apache-2.0
"""`zerolayer apply` on a real kernel (docs/spec.md §10): veth labs in
namespaces made per test, the real command in new processes. Idempotence,
--prune, another tool's program, replace, concurrent applies, --dry-run,
the exit codes, and --watch with link events (a rename too), SIGHUP, a
broken file and SIGTERM. Everything is made in the lab's dut namespace, which the lab
removes with its pins and locks, on failure too."""

import json
import os
import signal
import subprocess

import pytest

from pyxdp.kernel import netns
from pyxdp.service import lock
from pyxdp.xdp import netlink, pins
from support.cli_runner import ZEROLAYER
from support.tuning_fixtures import netns_sysctl, profile_text, write_profile
from support.watch_runner import WAIT_S, Watcher, wait_for
from support.xdp_helpers import load_foreign, one_line_error

pytestmark = [pytest.mark.root, pytest.mark.kernel]



def add_veth(lab, name: str, peer: str) -> None:
    """A veth pair, NAME in the lab's dut namespace and PEER in its peer
    namespace (which no file here names), both ends up."""
    from pyroute2 import IPRoute

    peer_fd = os.open(netns.path(lab.peer.netns), os.O_RDONLY)
    try:
        with netns.entered(lab.dut.netns), IPRoute() as ipr:
            ipr.link("add", ifname=name, kind="veth", peer={"ifname": peer, "net_ns_fd": peer_fd})
            ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
    finally:
        os.close(peer_fd)
    with netns.entered(lab.peer.netns), IPRoute() as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname=peer)[0], state="up")


def rename(lab, old: str, new: str) -> None:
    from pyroute2 import IPRoute

    with netns.entered(lab.dut.netns), IPRoute() as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname=old)[0], ifname=new)


def write(tmp_path, lab, *entries: str, extra: str = "") -> str:
    """A configuration of ENTRIES, each the body of an [[interface]] in the
    lab's dut namespace."""
    path = tmp_path / "zerolayer.toml"
    body = "".join(f'[[interface]]\n{e}\nnetns = "{lab.dut.netns}"\n\n' for e in entries)
    path.write_text(body + extra)
    return str(path)


def apply(path: str, *args, wait: str = "60") -> subprocess.CompletedProcess:
    return subprocess.run([ZEROLAYER, "apply", path, "--wait", wait, *args],
                          capture_output=True, text=True, timeout=300)


def apply_json(path: str, *args, code: int = 0) -> dict:
    proc = apply(path, "--json", *args)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    return json.loads(proc.stdout)


def by_interface(report: dict) -> dict[str | None, tuple[str, str]]:
    return {a["interface"]: (a["action"], a["status"]) for a in report["actions"]}


def status(lab) -> dict[str, dict]:
    proc = subprocess.run([ZEROLAYER, "status", "--netns", lab.dut.netns, "--json"],
                          capture_output=True, text=True, check=True)
    return {r["interface"]: r for r in json.loads(proc.stdout)["interfaces"]}


def test_apply_attaches_then_a_second_apply_changes_nothing(lab, tmp_path):
    path = write(tmp_path, lab, 'name = "dut0"\nports = [9977, 9978]\nflows = true')
    first = apply_json(path)
    assert first["changed"] is True and first["matched"] is True
    assert by_interface(first) == {"dut0": ("attach", "done")}
    row = status(lab)["dut0"]
    assert (row["owner"], row["ports"], row["flow_tracking"]) == ("zerolayer", [9977, 9978], True)

    second = apply_json(path)
    assert second["changed"] is False and by_interface(second) == {"dut0": ("keep", "ok")}

    # a change of settings is written live: the same program runs on
    write(tmp_path, lab, 'name = "dut0"\nports = [9979]\non_malformed = "pass"')
    third = apply_json(path)
    assert by_interface(third) == {"dut0": ("configure", "done")} and third["changed"]
    after = status(lab)["dut0"]
    assert after["program_id"] == row["program_id"]
    assert (after["ports"], after["on_malformed"], after["flow_tracking"]) == ([9979], "pass", False)
    assert apply_json(path)["changed"] is False


def test_dry_run_changes_nothing(lab, tmp_path):
    path = write(tmp_path, lab, 'name = "dut0"')
    proc = apply(path, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"dry-run {path}\n") and "planned" in proc.stdout
    report = apply_json(path, "--dry-run")
    assert report["dry_run"] and not report["changed"]
    assert by_interface(report) == {"dut0": ("attach", "planned")}
    assert netlink.query("dut0", lab.dut.netns).prog_id is None
    assert not os.path.exists(pins.pin_dir("dut0", lab.dut.netns))


def test_prune_detaches_only_zerolayer_that_the_file_no_longer_names(lab, tmp_path):
    add_veth(lab, "ap0", "pp0")
    add_veth(lab, "ap1", "pp1")
    add_veth(lab, "fx0", "px0")
    bpf, fd = load_foreign(tmp_path)
    ifindex = netlink.query("fx0", lab.dut.netns).ifindex
    netlink.set_program(ifindex, fd, "native", netns=lab.dut.netns)
    foreign_id = netlink.query("fx0", lab.dut.netns).prog_id

    path = write(tmp_path, lab, 'match = { name = "ap*", driver = "veth" }', 'name = "dut0"')
    assert by_interface(apply_json(path)) == {"ap0": ("attach", "done"), "ap1": ("attach", "done"),
                                             "dut0": ("attach", "done")}
    write(tmp_path, lab, 'name = "dut0"')
    # without --prune what the file no longer names stays as it is
    assert apply_json(path)["changed"] is False
    assert status(lab)["ap0"]["owner"] == "zerolayer"

    pruned = apply_json(path, "--prune")
    assert by_interface(pruned) == {"dut0": ("keep", "ok"), "ap0": ("detach", "done"),
                                   "ap1": ("detach", "done")}
    rows = status(lab)
    assert [rows[n]["owner"] for n in ("dut0", "ap0", "ap1", "fx0")] == \
        ["zerolayer", None, None, "foreign"]
    assert rows["fx0"]["program_id"] == foreign_id
    assert pins.pinned_interfaces(lab.dut.netns) == ["dut0"]
    assert apply_json(path, "--prune")["changed"] is False
    bpf.close()


def test_another_tools_program_is_left_alone_and_reported_unless_replace(lab, tmp_path):
    bpf, fd = load_foreign(tmp_path)
    netlink.set_program(netlink.query("dut0", lab.dut.netns).ifindex, fd, "native",
                        netns=lab.dut.netns)
    foreign_id = netlink.query("dut0", lab.dut.netns).prog_id
    path = write(tmp_path, lab, 'name = "dut0"')

    report = apply_json(path, code=1)
    assert by_interface(report) == {"dut0": ("foreign", "refused")}
    assert "foreign_xdp" in report["actions"][0]["reason"] and not report["matched"]
    line = one_line_error(apply(path))
    assert "could not make the host match" in line and "foreign_xdp" in line
    assert netlink.query("dut0", lab.dut.netns).prog_id == foreign_id

    write(tmp_path, lab, 'name = "dut0"\nreplace = true')
    assert by_interface(apply_json(path)) == {"dut0": ("replace", "done")}
    assert status(lab)["dut0"]["owner"] == "zerolayer"
    bpf.close()


def test_tuning_is_applied_once_in_the_labs_namespace(lab, tmp_path):
    """[tuning] with a profile of one per-namespace sysctl, its state under
    tmp_path: applied, then kept."""
    key = "net.ipv4.tcp_fastopen"
    profile = write_profile(tmp_path / "p.toml",
                            profile_text("p", ("fastopen", netns_sysctl(key, "3"))))
    path = write(tmp_path, lab, 'name = "dut0"', extra=(
        f'[tuning]\nprofile = "{profile}"\nnetns = "{lab.dut.netns}"\n'
        f'state_dir = "{tmp_path / "state"}"\n'))
    first = apply_json(path)
    assert [(a["action"], a["status"]) for a in first["actions"]] == \
        [("attach", "done"), ("tune", "done")]
    read = subprocess.run(["ip", "netns", "exec", lab.dut.netns, "sysctl", "-n", key],
                          capture_output=True, text=True, check=True)
    assert read.stdout.strip() == "3"
    second = apply_json(path)
    assert second["changed"] is False and second["actions"][-1]["reason"].endswith("every knob holds")


def test_exit_codes(lab, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[interface]]\nname = "dut0"\nport = [9977]\n')
    proc = apply(str(bad))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"zerolayer: {bad}:3: interface[1].port: unknown key "
                                   "(did you mean ports?); known here: name, match, netns, "
                                   "ports, on_malformed, mode, flows, forward, replace, priority")
    assert apply(str(tmp_path / "none.toml")).returncode == 2

    missing = write(tmp_path, lab, 'name = "nosuch0"')
    assert by_interface(apply_json(missing, code=1)) == {"nosuch0": ("missing", "refused")}
    assert "nosuch0" in one_line_error(apply(missing))
    assert "the plan cannot make" in one_line_error(apply(missing, "--dry-run"))
    no_netns = tmp_path / "netns.toml"
    no_netns.write_text(f'[[interface]]\nname = "dut0"\nnetns = "{lab.dut.netns}-nosuch"\n')
    (action,) = apply_json(str(no_netns), code=1)["actions"]
    assert action["reason"].endswith("does not exist")

    # a second apply while one holds the lock fails in one line, or waits
    ok = write(tmp_path, lab, 'name = "dut0"')
    with lock.held(0):
        line = one_line_error(apply(ok, wait="0"))
    assert "another zerolayer apply" in line and f"pid {os.getpid()}" in line
    assert netlink.query("dut0", lab.dut.netns).prog_id is None  # nothing was changed
    assert apply(ok).returncode == 0


def test_concurrent_applies_end_with_one_program_and_no_orphan_pins(lab, tmp_path):
    add_veth(lab, "cc0", "pc0")
    path = write(tmp_path, lab, 'name = "dut0"', 'match = { name = "cc*" }')
    procs = [subprocess.Popen([ZEROLAYER, "apply", path, "--wait", "120", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    try:
        finished = [(*p.communicate(timeout=300), p.returncode) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert [code for _, _, code in finished] == [0] * 4, finished
    results = [json.loads(out) for out, _, _ in finished]
    # the apply lock makes them one after another: one attached, the others kept
    assert sorted(r["changed"] for r in results) == [False, False, False, True]
    for name in ("dut0", "cc0"):
        state = netlink.query(name, lab.dut.netns)
        pin_dir = pins.pin_dir(name, lab.dut.netns)
        assert sorted(os.listdir(pin_dir)) == sorted([pins.PROG, *pins.MAPS])
        assert status(lab)[name]["owner"] == "zerolayer" and state.prog_id is not None
    assert pins.pinned_interfaces(lab.dut.netns) == ["cc0", "dut0"]


def test_watch_converges_on_links_on_sighup_and_keeps_the_last_good_file(lab, tmp_path):
    path = write(tmp_path, lab, 'name = "dut0"', 'match = { name = "w*" }')
    watcher = Watcher(path)
    try:
        watcher.wait_line("attach dut0")
        assert watcher.lines[0] == f"watching {path}"  # JOURNAL_STREAM: journald stamps the time

        add_veth(lab, "w0", "pw0")  # a link made after the start
        watcher.wait_line("attach w0")
        wait_for("w0 attached", lambda: status(lab)["w0"]["owner"] == "zerolayer")

        rename(lab, "w0", "wz0")  # zerolayer's pins, named after the interface, follow it
        watcher.wait_line("rename wz0")
        assert status(lab)["wz0"]["owner"] == "zerolayer"
        assert pins.pinned_interfaces(lab.dut.netns) == ["dut0", "wz0"]

        write(tmp_path, lab, 'name = "dut0"\nports = [9990]', 'match = { name = "w*" }')
        watcher.proc.send_signal(signal.SIGHUP)
        watcher.wait_line("configure dut0")
        wait_for("ports 9990", lambda: status(lab)["dut0"]["ports"] == [9990])

        before = status(lab)
        (tmp_path / "zerolayer.toml").write_text("[[interface]\nname = 'dut0'\n")
        watcher.proc.send_signal(signal.SIGHUP)
        watcher.wait_line("keeping the last good configuration")
        watcher.proc.send_signal(signal.SIGHUP)  # the same broken file: no second line
        add_veth(lab, "w2", "pw2")  # the last good file still applies
        watcher.wait_line("attach w2")
        assert watcher.count("keeping the last good configuration") == 1
        (line,) = [x for x in watcher.lines if "keeping" in x]
        assert line.startswith(f"{path}:1: ")
        after = status(lab)
        assert {n: after[n]["program_id"] for n in before} == \
            {n: before[n]["program_id"] for n in before}

        # a good file again, no SIGHUP: the change is seen
        write(tmp_path, lab, 'name = "dut0"\nports = [9991]', 'match = { name = "w*" }')
        wait_for("ports 9991", lambda: status(lab)["dut0"]["ports"] == [9991])

        assert watcher.stop() == 0
        assert watcher.lines[-1] == "stopped"
        # detach_on_stop is off: what runs stays
        assert all(status(lab)[n]["owner"] == "zerolayer" for n in ("dut0", "wz0", "w2"))
    finally:
        watcher.kill()


def test_watch_detaches_on_stop_when_the_file_says_so(lab, tmp_path):
    path = write(tmp_path, lab, 'name = "dut0"', extra="[service]\ndetach_on_stop = true\n")
    watcher = Watcher(path)
    try:
        watcher.wait_line("attach dut0")
        assert watcher.stop() == 0
        assert "detach dut0 (netns %s): done: detach_on_stop" % lab.dut.netns in watcher.lines
        assert netlink.query("dut0", lab.dut.netns).prog_id is None
        assert pins.pinned_interfaces(lab.dut.netns) == []
    finally:
        watcher.kill()


def test_the_exporter_listens_where_the_file_says(lab, tmp_path):
    path = write(tmp_path, lab, 'name = "dut0"',
                 extra='[exporter]\naddress = "127.0.0.1"\nport = 0\n')
    proc = subprocess.Popen([ZEROLAYER, "exporter", "--config", path, "--json",
                             "--netns", lab.dut.netns],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        start = json.loads(proc.stdout.readline())
        assert start["address"] == "127.0.0.1" and start["port"] > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    both = subprocess.run([ZEROLAYER, "exporter", "--config", path, "--listen", "127.0.0.1:1"],
                          capture_output=True, text=True)
    assert both.returncode == 2 and "not both" in both.stderr
    (tmp_path / "zerolayer.toml").write_text("[exporter]\naddres = '::1'\n")
    bad = subprocess.run([ZEROLAYER, "exporter", "--config", path], capture_output=True, text=True)
    assert (bad.returncode, bad.stderr) == (2, f"zerolayer: {path}:2: exporter.addres: unknown "
                                               "key (did you mean address?); known here: "
                                               "address, port\n")
