# SPDX-License-Identifier: Apache-2.0
"""The engine against a fake root: a copy of the host's sysctls plus a made-up
machine (cpufreq, idle states, two NUMA nodes, a NIC with MSI IRQs).

This is how the global knobs (busy polling, rmem_max, governor, IRQs) are
exercised without touching the host, and how inf2 + revert is shown to give
back byte-identical files, starting from the host's own values.
"""

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time

import pytest

from pyxdp.errors import ZerolayerError
from pyxdp.tuning import engine, profile
from support.tuning_fixtures import (
    FAKE_NIC,
    ZEROLAYER,
    make_fake_root,
    run_cli,
    tree,
)


@pytest.fixture
def root(tmp_path):
    return make_fake_root(tmp_path)


def state_path(root: str) -> str:
    return os.path.join(root, "run/zerolayer/tune/host.json")


def read(root: str, relative: str) -> str:
    with open(os.path.join(root, relative)) as f:
        return f.read().strip()


def write(root: str, relative: str, text: str) -> None:
    with open(os.path.join(root, relative), "w") as f:
        f.write(text + "\n")


def by_knob(report) -> dict:
    return {row.knob: row for row in report.rows}


def test_inf2_then_revert_gives_back_identical_files(root):
    write(root, "proc/sys/kernel/numa_balancing", "1")  # as on a NUMA host
    before = tree(root)
    report = engine.apply(profile.load("inf2"), root=root, interfaces=[FAKE_NIC])
    rows = by_knob(report)
    expected = {
        "cpufreq scaling_governor": ("powersave", "performance"),
        "kernel.numa_balancing": ("1", "0"),
        "cpuidle states disabled": ("none", "C1E,C6"),
        f"{FAKE_NIC} irq 40-41 affinity": ("0-1", "1"),  # the NIC is on node 1
        "net.core.busy_read": (None, "50"),
        "net.core.busy_poll": (None, "50"),
        "net.ipv4.tcp_fastopen": (None, "3"),
    }
    for knob, (was, now) in expected.items():
        row = rows[knob]
        assert row.status in ("applied", "unchanged"), (knob, row)
        assert row.after == now, (knob, row)
        if was is not None:
            assert row.before == was, (knob, row)
    assert read(root, "sys/devices/system/cpu/cpu1/cpuidle/state3/disable") == "1"
    assert read(root, "sys/devices/system/cpu/cpu1/cpuidle/state1/disable") == "0"
    assert read(root, "proc/irq/41/smp_affinity_list") == "1"
    assert rows[f"{FAKE_NIC} root qdisc"].status == "skipped"
    assert "fake root" in rows[f"{FAKE_NIC} root qdisc"].reason
    assert rows["kernel.randomize_va_space"].status == "refused"
    assert tree(root) != before

    assert engine.verify(root=root).error is None
    undo = engine.revert(root=root)
    assert {row.status for row in undo.rows} <= {"restored"}
    assert tree(root) == before
    assert not os.path.exists(state_path(root))


def test_each_shipped_profile_reverts_to_identical_files(root):
    before = tree(root)
    for name in profile.shipped():
        engine.apply(profile.load(name), root=root, interfaces=[FAKE_NIC])
    engine.revert(root=root)
    assert tree(root) == before


def test_scopes_apply_only_the_knobs_of_those_scopes(root):
    # What `zerolayer bench --section tune` does: a namespace's own knobs, and
    # the host-wide ones only when asked, each pass reverted as one.
    before = tree(root)
    busy_read = read(root, "proc/sys/net/core/busy_read")
    own = engine.apply(profile.load("latency"), root=root, scopes={"netns"})
    rows = by_knob(own)
    assert rows["net.ipv4.tcp_fastopen"].status in ("applied", "unchanged")
    assert read(root, "proc/sys/net/ipv4/tcp_fastopen") == "3"
    for knob in ("net.core.busy_read", "cpufreq scaling_governor", "kernel.numa_balancing"):
        assert rows[knob].status == "skipped", knob
        assert rows[knob].reason == "global knob: left out, only netns knobs were asked for"
    assert read(root, "proc/sys/net/core/busy_read") == busy_read
    assert rows["process binding (numactl)"].status == "skipped"  # a note stays a note

    host = by_knob(engine.apply(profile.load("latency"), root=root, scopes={"global"}))
    assert host["net.core.busy_read"].status in ("applied", "unchanged")
    assert read(root, "proc/sys/net/core/busy_read") == "50"
    assert host["net.ipv4.tcp_autocorking"].reason == (
        "netns knob: left out, only global knobs were asked for")
    engine.revert(root=root)
    assert tree(root) == before


def test_dry_run_writes_no_file(root):
    before = tree(root)
    report = engine.apply(profile.load("inf2"), root=root, interfaces=[FAKE_NIC],
                          dry_run=True)
    assert by_knob(report)["cpufreq scaling_governor"].status == "planned"
    assert by_knob(report)["cpufreq scaling_governor"].after == "performance"
    assert tree(root) == before
    assert not os.path.exists(os.path.join(root, "run"))


def test_a_missing_file_is_enoent_and_strict_makes_it_fatal(root):
    os.unlink(os.path.join(root, "proc/sys/net/core/busy_read"))
    report = engine.apply(profile.load("inf2"), root=root)
    row = by_knob(report)["net.core.busy_read"]
    assert row.status == "skipped"
    assert row.reason == "ENOENT: not in this kernel, or not in this netns"
    assert not os.path.exists(os.path.join(root, "proc/sys/net/core/busy_read"))
    assert report.error is None
    engine.revert(root=root)

    strict = engine.apply(profile.load("inf2"), root=root, strict=True)
    assert strict.rows[-1].knob == "net.core.busy_read"
    assert strict.error.startswith("--strict: stopped at step busy-poll")
    engine.revert(root=root)


def test_a_kernel_without_numa_balancing_has_nothing_to_turn_off(root):
    # No CONFIG_NUMA_BALANCING, no sysctl: skipped with the reason, and not a
    # missing knob, so --strict goes on.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(root, "proc/sys/kernel/numa_balancing"))
    before = tree(root)
    report = engine.apply(profile.load("inf2"), root=root, strict=True)
    row = by_knob(report)["kernel.numa_balancing"]
    assert (row.step, row.status, row.before, row.after) == ("numa", "skipped", None, None)
    assert row.reason.startswith("ENOENT: this kernel has no automatic NUMA balancing")
    assert report.error is None and report.rows[-1].step == "napi-deferral"
    engine.revert(root=root)
    assert tree(root) == before


def test_unavailable_governor_is_skipped(root):
    for cpu in (0, 1):
        write(root, f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_available_governors",
              "powersave schedutil")
    report = engine.apply(profile.load("latency"), root=root)
    row = by_knob(report)["cpufreq scaling_governor"]
    assert row.status == "skipped" and row.reason.startswith("EINVAL: governor 'performance'")
    engine.revert(root=root)


def test_drift_in_one_cpu_is_shown_and_left_alone(root):
    before = tree(root)
    engine.apply(profile.load("latency"), root=root)
    write(root, "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave")
    check = engine.verify(root=root)
    row = by_knob(check)["cpufreq scaling_governor"]
    assert (row.status, row.after) == ("drifted", "cpu0=performance cpu1=powersave")
    assert check.error

    undo = engine.revert(root=root)
    assert by_knob(undo)["cpufreq scaling_governor"].status == "drifted"
    assert read(root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") == "performance"
    # put back by hand what revert left alone
    write(root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave")
    assert tree(root) == before


def test_state_file_survives_a_crash_and_revert_recovers(root):
    # The engine is killed while blocked reading a knob (a FIFO stands in for
    # net.core.busy_poll). Everything written before must be in the state file.
    before = tree(root)
    busy_poll = os.path.join(root, "proc/sys/net/core/busy_poll")
    original = read(root, "proc/sys/net/core/busy_poll")
    os.unlink(busy_poll)
    os.mkfifo(busy_poll)
    proc = subprocess.Popen([ZEROLAYER, "tune", "--profile", "inf2", "--root", root,
                             "-i", FAKE_NIC], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while read(root, "proc/sys/net/core/busy_read") != "50":
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.2)  # let it reach the FIFO, where it blocks
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    with open(state_path(root)) as f:
        saved = json.load(f)
    written = {e["label"]: e for e in saved["knobs"] if e["wrote"]}
    assert "net.core.busy_read" in written and "net.core.busy_poll" not in written
    assert written["cpufreq scaling_governor"]["original"] == "powersave"

    # A crash while saving leaves a temporary file; the next run removes it.
    leftover = state_path(root) + ".tmp.99999"
    with open(leftover, "w") as f:
        f.write('{"half": ')
    os.unlink(busy_poll)
    write(root, "proc/sys/net/core/busy_poll", original)

    done = run_cli("--revert", "--root", root, "--json", check_rc=0)
    assert {s["status"] for s in json.loads(done.stdout)["steps"]} == {"restored"}
    assert not os.path.exists(leftover) and not os.path.exists(state_path(root))
    assert tree(root) == before


def test_a_knob_recorded_but_never_written_reverts_as_unchanged(root):
    # Write-ahead: the state names a knob before it is written. A crash right
    # between the two leaves the original in place; revert must not mind.
    engine.apply(profile.load("latency"), root=root)
    with open(state_path(root)) as f:
        saved = json.load(f)
    entry = next(e for e in saved["knobs"] if e["label"] == "net.core.busy_read")
    write(root, "proc/sys/net/core/busy_read", entry["original"])
    undo = engine.revert(root=root)
    assert by_knob(undo)["net.core.busy_read"].status == "unchanged"


def test_damaged_state_file_is_a_one_line_error(root):
    os.makedirs(os.path.dirname(state_path(root)))
    with open(state_path(root), "w") as f:
        f.write("{not json")
    with pytest.raises(ZerolayerError, match="is damaged"):
        engine.revert(root=root)
    done = run_cli("--verify", "--root", root, check_rc=1)
    assert done.stderr.count("\n") == 1 and "is damaged" in done.stderr


def test_a_second_run_waits_for_nobody_and_says_so(root):
    directory = os.path.dirname(state_path(root))
    os.makedirs(directory)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(ZerolayerError, match="another `zerolayer tune` is running"):
            engine.apply(profile.load("inf2"), root=root)
    finally:
        os.close(fd)


def test_cpuidle_only_adds_deep_states_and_keeps_what_was_disabled(root):
    write(root, "sys/devices/system/cpu/cpu0/cpuidle/state0/disable", "1")
    before = tree(root)
    row = by_knob(engine.apply(profile.load("latency"), root=root))["cpuidle states disabled"]
    assert (row.before, row.after) == ("cpu0=POLL cpu1=none", "cpu0=POLL,C1E,C6 cpu1=C1E,C6")
    assert read(root, "sys/devices/system/cpu/cpu0/cpuidle/state0/disable") == "1"
    engine.revert(root=root)
    assert tree(root) == before


def test_throughput_never_lowers_a_larger_limit(root):
    # The host allows 32 MiB receive windows; throughput asks at least 16 MiB.
    write(root, "proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t33554432")
    write(root, "proc/sys/net/core/rmem_max", "67108864")
    write(root, "proc/sys/net/ipv4/tcp_wmem", "4096\t65536\t4194304")
    before = tree(root)
    plan = by_knob(engine.apply(profile.load("throughput"), root=root, dry_run=True))
    assert plan["net.ipv4.tcp_rmem"].status == "kept"
    assert plan["net.ipv4.tcp_rmem"].reason == (
        "asked at least 4096 131072 16777216: field 3 (33554432) is higher already, "
        "so it stays")
    assert plan["net.core.rmem_max"].status == "kept"
    assert plan["net.core.rmem_max"].reason.startswith(
        "asked at least 16777216: 67108864 is higher already")
    # Field by field: wmem's larger default stays, its smaller maximum is raised.
    wmem = plan["net.ipv4.tcp_wmem"]
    assert (wmem.status, wmem.after) == ("planned", "4096 65536 16777216")
    assert "field 2 (65536) is higher already" in wmem.reason

    report = engine.apply(profile.load("throughput"), root=root)
    assert by_knob(report)["net.ipv4.tcp_rmem"].status == "kept"
    assert read(root, "proc/sys/net/ipv4/tcp_rmem").split() == ["4096", "131072", "33554432"]
    assert read(root, "proc/sys/net/core/rmem_max") == "67108864"
    assert read(root, "proc/sys/net/ipv4/tcp_wmem") == "4096 65536 16777216"
    with open(state_path(root)) as f:
        saved = {e["label"]: e for e in json.load(f)["knobs"]}
    assert not saved["net.ipv4.tcp_rmem"]["wrote"]

    # Raising a bounded limit further is no drift; lowering it below is.
    write(root, "proc/sys/net/ipv4/tcp_wmem", "4096 65536 33554432")
    assert engine.verify(root=root).error is None
    write(root, "proc/sys/net/ipv4/tcp_wmem", "4096 65536 8388608")
    drift = by_knob(engine.verify(root=root))["net.ipv4.tcp_wmem"]
    assert drift.status == "drifted" and "at least '4096 16384 16777216'" in drift.reason
    write(root, "proc/sys/net/ipv4/tcp_wmem", "4096 65536 16777216")

    undo = engine.revert(root=root)
    # Revert restores exactly what moved: nothing for the kept rows.
    assert "net.ipv4.tcp_rmem" not in by_knob(undo)
    assert by_knob(undo)["net.ipv4.tcp_wmem"].status == "restored"
    assert tree(root) == before


def test_at_most_keeps_a_lower_value_field_by_field():
    from pyxdp.tuning import bound

    assert bound.held("10 5", "8 8", "at-most") == ("8 5", [2])
    assert bound.held("3", "8", "at-least") == ("8", [])
    assert bound.held("abc", "8", "at-least") == ("8", [])  # not comparable: asked as is


def test_revert_dry_run_shows_the_plan_and_changes_nothing(root):
    engine.apply(profile.load("inf2"), root=root, interfaces=[FAKE_NIC])
    applied = tree(root)
    plan = engine.revert(root=root, dry_run=True)
    assert plan.action == "revert-dry-run" and plan.error is None
    rows = by_knob(plan)
    assert (rows["cpufreq scaling_governor"].before, rows["cpufreq scaling_governor"].after,
            rows["cpufreq scaling_governor"].status) == ("performance", "powersave", "planned")
    assert {row.status for row in plan.rows} == {"planned"}
    assert tree(root) == applied  # the state file too
    undo = engine.revert(root=root)
    assert [row.knob for row in undo.rows] == [row.knob for row in plan.rows]
    assert not os.path.exists(state_path(root))
