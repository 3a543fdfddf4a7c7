# SPDX-License-Identifier: Apache-2.0
"""`zerolayer tune` as a user runs it: a subprocess, its output and exit code.

Tests in a namespace need root; those on a fake root, or that fail before
anything is touched, run as anyone.
"""

import json
import subprocess

import pytest

from support.tuning_fixtures import (
    FAKE_NIC,
    ZEROLAYER,
    make_fake_root,
    netns_sysctl,
    profile_text,
    run_cli,
    write_profile,
)

# A row's keys, in the order docs/spec.md §5.8 gives them.
ROW_KEYS = ("step", "knob", "before", "after", "status", "reason", "kind", "scope", "item")
STATUSES = {"applied", "unchanged", "kept", "skipped", "refused", "planned", "restored",
            "drifted"}


@pytest.mark.root
def test_json_shape_and_round_trip_in_a_netns(ns, tmp_path):
    state = ["--state-dir", str(tmp_path)]
    applied = run_cli("--profile", "inf2", "--netns", ns, "-i", "zv0", "--json", *state,
                      check_rc=0)
    out = json.loads(applied.stdout)
    assert out["profile"] == "inf2" and out["netns"] == ns and out["action"] == "apply"
    assert out["steps"] and all(tuple(s) == ROW_KEYS for s in out["steps"])
    assert {s["status"] for s in out["steps"]} <= STATUSES
    fastopen = next(s for s in out["steps"] if s["knob"] == "net.ipv4.tcp_fastopen")
    assert (fastopen["step"], fastopen["after"], fastopen["status"]) == (
        "tcp-fastopen", "3", "applied")

    verified = json.loads(run_cli("--verify", "--netns", ns, "--json", *state,
                                  check_rc=0).stdout)
    assert {s["status"] for s in verified["steps"]} == {"applied"}

    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_fastopen=2"],
                   check=True)
    drift = run_cli("--verify", "--netns", ns, *state, check_rc=1)
    assert "drifted" in drift.stdout
    assert drift.stderr.startswith("zerolayer: drift: 1 knob") and drift.stderr.count("\n") == 1

    reverted = json.loads(run_cli("--revert", "--netns", ns, "--json", *state,
                                  check_rc=0).stdout)
    assert reverted["action"] == "revert"
    assert {s["status"] for s in reverted["steps"]} == {"restored", "drifted"}


def test_human_table(tmp_path):
    root = make_fake_root(tmp_path)
    done = run_cli("--profile", "inf2", "--root", root, "-i", FAKE_NIC, "--dry-run",
                   check_rc=0)
    lines = done.stdout.splitlines()
    assert lines[0] == f"dry-run inf2 on fake root {root}"
    assert lines[1].startswith("preflight: kernel ")
    assert lines[2].split() == ["STEP", "KNOB", "BEFORE", "→", "AFTER", "STATUS", "REASON"]
    gov = next(line for line in lines if "scaling_governor" in line)
    assert "powersave → performance" in gov and " planned " in gov
    assert lines[-1].endswith(" refused")  # the counts, last


# `tune --profile inf2 -i fake0` on the fake root: (step, item, knob) of each
# row, in order. The checklist's items 1-12, then BBR with fq, nodelay and busy
# polling; most knobs come from the latency profile, which inf2 includes.
INF2_PLAN = [
    ("neuron-latency", 1, "NeuronCore low_latency_mode"),
    ("cpu-power", 2, "cpufreq scaling_governor"),
    ("cpu-power", 2, "cpuidle states disabled"),
    ("rmem-max", 3, "net.core.rmem_max"),
    ("numa", 4, "process binding (numactl)"),
    ("numa", 4, "kernel.numa_balancing"),
    ("numa", 4, f"{FAKE_NIC} irq 40-41 affinity"),
    ("ipv6", 5, "net.ipv6.conf.all.disable_ipv6"),
    ("zerocopy", 6, "SO_ZEROCOPY"),
    ("bpf-jit-limit", 7, "net.core.bpf_jit_limit"),
    ("aslr", 8, "kernel.randomize_va_space"),
    ("neuron-cores", 9, "NEURON_RT_NUM_CORES"),
    ("quickack", 10, "TCP_QUICKACK"),
    ("tcp-fastopen", 11, "net.ipv4.tcp_fastopen"),
    ("mmap-buffers", 12, "mmap token buffers"),
    ("congestion", None, "net.ipv4.tcp_congestion_control"),
    ("congestion", None, f"{FAKE_NIC} root qdisc"),
    ("congestion", None, "net.core.default_qdisc"),
    ("nodelay", None, "net.ipv4.tcp_nodelay"),
    ("nodelay", None, "net.ipv4.tcp_autocorking"),
    ("busy-poll", None, "net.core.busy_read"),
    ("busy-poll", None, "net.core.busy_poll"),
    ("napi-deferral", None, "IFACE/napi_defer_hard_irqs, IFACE/gro_flush_timeout"),
    ("napi-deferral", None, "IFACE's NAPI irq-suspend-timeout"),
]


def test_inf2_dry_run_plan(tmp_path):
    root = make_fake_root(tmp_path)
    with open(f"{root}/proc/sys/kernel/numa_balancing", "w") as f:
        f.write("1\n")  # as on a NUMA host, where it defaults to on
    done = run_cli("--profile", "inf2", "--root", root, "-i", FAKE_NIC, "--dry-run", "--json",
                   check_rc=0)
    out = json.loads(done.stdout)
    assert out["action"] == "dry-run" and "error" not in out
    rows = out["steps"]
    assert [(r["step"], r["item"], r["knob"]) for r in rows] == INF2_PLAN
    assert all(tuple(r) == ROW_KEYS for r in rows)
    assert {r["status"] for r in rows} <= {"planned", "unchanged", "skipped", "refused"}
    numa = rows[5]
    assert (numa["before"], numa["after"], numa["status"]) == ("1", "0", "planned")
    assert "unmaps pages" in numa["reason"] and "tuned" in numa["reason"]
    assert rows[4]["reason"].startswith("not a host setting: start the server under `numactl")
    assert [r["knob"] for r in rows if r["status"] == "refused"] == [
        "net.ipv6.conf.all.disable_ipv6", "kernel.randomize_va_space"]


@pytest.mark.parametrize("args", [
    [],
    ["--revert", "--verify"],
    ["--verify", "--strict"],
    ["--verify", "--dry-run"],
    ["--revert", "-i", "eth0"],
    ["--profile"],
])
def test_usage_errors_exit_2(args):
    done = run_cli(*args, check_rc=2)
    assert "Usage" in done.stderr or "Error" in done.stderr


def test_a_profile_that_does_not_load_exits_2_with_one_line():
    """As apply's file: a profile that cannot be read or is wrong (docs/spec.md §5.8)."""
    done = run_cli("--profile", "turbo", check_rc=2)
    assert done.stderr.startswith("zerolayer: no profile named 'turbo'")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("args, message", [
    # --netns is checked for root first
    pytest.param(["--profile", "inf2", "--netns", "zl-no-such-ns"], "does not exist",
                 marks=pytest.mark.root),
    pytest.param(["--profile", "inf2", "--netns", "x", "--root", "/tmp"], "do not go together",
                 marks=pytest.mark.root),
    (["--verify", "--state-dir", "/nonexistent/zl"], "nothing to verify"),
])
def test_expected_failures_exit_1_with_one_line(args, message):
    done = run_cli(*args, check_rc=1)
    assert done.stderr.startswith("zerolayer: ") and message in done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.root
def test_strict_failure_prints_the_table_then_one_line(ns, tmp_path):
    profile = write_profile(tmp_path / "p.toml", profile_text(
        "p", ("a", netns_sysctl("net.ipv4.tcp_fastopen", "3")),
        ("b", netns_sysctl("net.ipv4.tcp_ecn", "9"))))
    state = ["--state-dir", str(tmp_path / "state")]
    done = run_cli("--profile", profile, "--netns", ns, "--strict", "--json", *state,
                   check_rc=1)
    out = json.loads(done.stdout)
    assert [s["status"] for s in out["steps"]] == ["applied", "skipped"]
    assert out["error"].startswith("--strict: stopped at step b")
    assert done.stderr.count("\n") == 1 and "--revert" in done.stderr
    run_cli("--revert", "--netns", ns, *state, check_rc=0)


@pytest.mark.root  # to become someone else
def test_not_root_is_one_line(tmp_path):
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           ZEROLAYER, "tune", "--profile", "inf2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == "zerolayer: tune needs root: run it with sudo\n"


def test_list(tmp_path):
    out = json.loads(run_cli("--list", "--json", check_rc=0).stdout)
    assert [p["name"] for p in out["profiles"]] == ["inf2", "latency", "throughput"]
    assert "inf2" in run_cli("--list", check_rc=0).stdout


def test_tune_is_in_the_help():
    done = subprocess.run([ZEROLAYER, "--help"], capture_output=True, text=True, check=True)
    assert "tune" in done.stdout


def test_refused_and_kept_rows_show_the_value_they_hold(tmp_path):
    root = make_fake_root(tmp_path)
    with open(f"{root}/proc/sys/net/ipv6/conf/all/disable_ipv6", "w") as f:
        f.write("0\n")
    done = run_cli("--profile", "inf2", "--root", root, "--dry-run", check_rc=0)
    ipv6 = next(line for line in done.stdout.splitlines() if "disable_ipv6" in line)
    assert ipv6.split()[2:4] == ["0", "refused"]  # not "0 → 0"


def test_revert_dry_run_on_a_fake_root(tmp_path):
    root = make_fake_root(tmp_path)
    run_cli("--profile", "inf2", "--root", root, "-i", FAKE_NIC, check_rc=0)
    out = json.loads(run_cli("--revert", "--dry-run", "--root", root, "--json",
                             check_rc=0).stdout)
    assert out["action"] == "revert-dry-run"
    assert out["steps"] and {s["status"] for s in out["steps"]} == {"planned"}
    again = json.loads(run_cli("--revert", "--root", root, "--json", check_rc=0).stdout)
    assert [s["knob"] for s in again["steps"]] == [s["knob"] for s in out["steps"]]
    assert {s["status"] for s in again["steps"]} == {"restored"}
