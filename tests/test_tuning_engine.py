# SPDX-License-Identifier: Apache-2.0
"""The tuning engine against the real kernel, in throwaway network namespaces.

Each test makes its own namespace (see tuning_fixtures.namespace) and keeps
its state file under tmp_path. Nothing here touches the host: the
session-wide host_sysctls_unchanged fixture checks that.
"""

import json
import os
import subprocess

import pytest

from pyxdp.errors import ZerolayerError
from pyxdp.tuning import engine, profile
from support.tuning_fixtures import (
    ZEROLAYER,
    diff,
    namespace,
    netns_sysctl,
    ns_state,
    profile_text,
    qdiscs,
    sysctl_all,
    write_profile,
)

pytestmark = pytest.mark.root


def sysctl(ns_name: str, name: str) -> str:
    out = subprocess.run(["ip", "netns", "exec", ns_name, "sysctl", "-n", name],
                         capture_output=True, text=True, check=True).stdout
    return " ".join(out.split())


def set_sysctl(ns_name: str, name: str, value: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns_name, "sysctl", "-qw", f"{name}={value}"],
                   check=True)


def statuses(report) -> dict[str, str]:
    return {row.knob: row.status for row in report.rows}


def load_profile(tmp_path, name: str, *steps: tuple[str, dict]) -> profile.Profile:
    return profile.load(write_profile(tmp_path / f"{name}.toml", profile_text(name, *steps)))


def netns_profile(tmp_path, *knobs: tuple[str, str], name="t") -> profile.Profile:
    """A profile with one step per (sysctl, value), all per-netns."""
    return load_profile(tmp_path, name, *((f"s{i}", netns_sysctl(key, value))
                                          for i, (key, value) in enumerate(knobs, 1)))


# Two per-netns sysctls the kernel checks against each other: the local port
# range may not start below ip_unprivileged_port_start. Going to (400, 500)
# only works unprivileged-first, and coming back only range-first.
ORDERED = (("net.ipv4.ip_unprivileged_port_start", "400"),
           ("net.ipv4.ip_local_port_range", "500 60999"))


def test_apply_runs_in_profile_order_and_revert_in_reverse(ns, tmp_path):
    before = ns_state(ns)
    report = engine.apply(netns_profile(tmp_path, *ORDERED), netns=ns, state_dir=tmp_path)
    assert [row.status for row in report.rows] == ["applied", "applied"]
    assert sysctl(ns, "net.ipv4.ip_local_port_range") == "500 60999"

    undo = engine.revert(netns=ns, state_dir=tmp_path)
    assert [row.knob for row in undo.rows] == [key for key, _ in reversed(ORDERED)]
    assert [row.status for row in undo.rows] == ["restored", "restored"]
    assert ns_state(ns) == before
    assert not os.path.exists(undo.state_file)


def test_the_kernel_really_enforces_that_order(ns, tmp_path):
    # The control for the test above: the other way round, the range is rejected.
    report = engine.apply(netns_profile(tmp_path, *reversed(ORDERED)), netns=ns,
                          state_dir=tmp_path)
    rows = {row.knob: row for row in report.rows}
    assert rows["net.ipv4.ip_local_port_range"].status == "skipped"
    assert rows["net.ipv4.ip_local_port_range"].reason.startswith("EINVAL")
    assert rows["net.ipv4.ip_unprivileged_port_start"].status == "applied"
    engine.revert(netns=ns, state_dir=tmp_path)


def test_second_apply_is_unchanged_and_keeps_the_first_snapshot(ns, tmp_path):
    prof = netns_profile(tmp_path, ("net.ipv4.tcp_fastopen", "3"),
                         ("net.ipv4.tcp_autocorking", "0"))
    original = sysctl(ns, "net.ipv4.tcp_fastopen")
    first = engine.apply(prof, netns=ns, state_dir=tmp_path)
    assert set(statuses(first).values()) == {"applied"}
    mtime = os.stat(first.state_file).st_mtime_ns

    again = engine.apply(prof, netns=ns, state_dir=tmp_path)
    assert set(statuses(again).values()) == {"unchanged"}
    assert all(row.before == row.after for row in again.rows)

    # Someone changes a knob; re-applying writes it again but the state keeps
    # the value from before the *first* run.
    set_sysctl(ns, "net.ipv4.tcp_fastopen", "2")
    third = engine.apply(prof, netns=ns, state_dir=tmp_path)
    assert statuses(third)["net.ipv4.tcp_fastopen"] == "applied"
    with open(third.state_file) as f:
        saved = {e["key"]: e for e in json.load(f)["knobs"]}
    assert saved["sysctl:net.ipv4.tcp_fastopen"]["original"] == original
    assert os.stat(third.state_file).st_mtime_ns != mtime

    engine.revert(netns=ns, state_dir=tmp_path)
    assert sysctl(ns, "net.ipv4.tcp_fastopen") == original


def test_dry_run_plans_and_changes_nothing(ns, tmp_path):
    before = ns_state(ns)
    report = engine.apply(profile.load("inf2"), netns=ns, interfaces=["zv0", "zq0"],
                          dry_run=True, state_dir=tmp_path / "state")
    assert report.action == "dry-run"
    planned = {row.knob: row for row in report.rows if row.status == "planned"}
    assert planned["net.ipv4.tcp_fastopen"].after == "3"
    assert planned["net.ipv4.tcp_autocorking"].after == "0"
    assert "applied" not in statuses(report).values()
    assert ns_state(ns) == before
    assert not (tmp_path / "state").exists()  # no state file, not even its directory


def test_strict_stops_at_a_rejected_value_and_revert_undoes_the_rest(ns, tmp_path):
    before = ns_state(ns)
    prof = netns_profile(tmp_path, ("net.ipv4.tcp_fastopen", "3"),
                         ("net.ipv4.tcp_autocorking", "0"),
                         ("net.ipv4.tcp_ecn", "9"),  # the kernel allows 0-2
                         ("net.ipv4.tcp_sack", "0"))
    report = engine.apply(prof, netns=ns, strict=True, state_dir=tmp_path)
    assert [row.status for row in report.rows] == ["applied", "applied", "skipped"]
    assert report.rows[-1].reason == "EINVAL: the kernel rejected '9'"
    assert report.error.startswith("--strict: stopped at step s3")
    assert "2 knob(s) changed" in report.error
    assert sysctl(ns, "net.ipv4.tcp_sack") == before[0]["net.ipv4.tcp_sack"]

    undo = engine.revert(netns=ns, state_dir=tmp_path)
    assert [row.status for row in undo.rows] == ["restored", "restored"]
    assert ns_state(ns) == before


def test_without_strict_a_rejected_value_is_skipped_and_the_rest_applied(ns, tmp_path):
    prof = netns_profile(tmp_path, ("net.ipv4.tcp_ecn", "9"), ("net.ipv4.tcp_sack", "0"))
    report = engine.apply(prof, netns=ns, state_dir=tmp_path)
    assert statuses(report) == {"net.ipv4.tcp_ecn": "skipped", "net.ipv4.tcp_sack": "applied"}
    assert report.error is None
    with open(report.state_file) as f:
        assert [e["key"] for e in json.load(f)["knobs"]] == ["sysctl:net.ipv4.tcp_sack"]
    engine.revert(netns=ns, state_dir=tmp_path)


def test_drift_is_reported_by_verify_and_left_alone_by_revert(ns, tmp_path):
    prof = netns_profile(tmp_path, ("net.ipv4.tcp_fastopen", "3"),
                         ("net.ipv4.tcp_autocorking", "0"))
    original_autocorking = sysctl(ns, "net.ipv4.tcp_autocorking")
    engine.apply(prof, netns=ns, state_dir=tmp_path)
    assert engine.verify(netns=ns, state_dir=tmp_path).error is None

    set_sysctl(ns, "net.ipv4.tcp_fastopen", "2")
    check = engine.verify(netns=ns, state_dir=tmp_path)
    assert statuses(check) == {"net.ipv4.tcp_fastopen": "drifted",
                               "net.ipv4.tcp_autocorking": "applied"}
    assert check.error.startswith("drift: 1 knob")

    undo = engine.revert(netns=ns, state_dir=tmp_path)
    assert statuses(undo) == {"net.ipv4.tcp_fastopen": "drifted",
                              "net.ipv4.tcp_autocorking": "restored"}
    assert sysctl(ns, "net.ipv4.tcp_fastopen") == "2"  # someone else's value stays
    assert sysctl(ns, "net.ipv4.tcp_autocorking") == original_autocorking
    assert undo.error is None


def test_missing_knobs_are_skipped_with_their_errno(ns, tmp_path):
    prof = load_profile(
        tmp_path, "missing",
        # a global sysctl is not in another netns
        ("absent", netns_sysctl("net.core.busy_read", "50")),
        # other namespaces see rmem_max read-only (6.18) or not at all (6.1)
        ("read-only", netns_sysctl("net.core.rmem_max", "16777216")),
        # names no kernel has: fq and vegas are built into some kernels,
        # modules in others (Debian's), so they prove nothing everywhere
        ("no-qdisc", {"kind": "qdisc", "value": "zl_no_such_qdisc"}),
        ("no-congestion", netns_sysctl("net.ipv4.tcp_congestion_control", "zl_no_such_cc")))
    report = engine.apply(prof, netns=ns, interfaces=["zv0"], state_dir=tmp_path)
    reasons = {row.knob: (row.status, row.reason) for row in report.rows}
    assert reasons["net.core.busy_read"][1].startswith("ENOENT")
    assert reasons["net.core.rmem_max"][1].startswith(("EACCES", "ENOENT"))
    assert reasons["zv0 root qdisc"][1].startswith("ENOENT: qdisc 'zl_no_such_qdisc'")
    assert reasons["net.ipv4.tcp_congestion_control"][1].startswith(
        "ENOENT: congestion control 'zl_no_such_cc'")
    assert reasons["net.core.default_qdisc"][1].startswith("global knob")
    assert {status for status, _ in reasons.values()} == {"skipped"}
    assert report.error is None

    strict = engine.apply(prof, netns=ns, interfaces=["zv0"], strict=True,
                          state_dir=tmp_path)
    assert len(strict.rows) == 1 and strict.error.startswith("--strict: stopped at step absent")

    planned = engine.apply(prof, netns=ns, interfaces=["zv0"], strict=True, dry_run=True,
                           state_dir=tmp_path)
    assert len(planned.rows) == len(report.rows)  # a dry run shows the whole plan
    assert planned.error.startswith("--strict: apply would stop at step absent")


def test_read_only_proc_sys_gives_erofs(ns, tmp_path):
    # A container's view: /proc/sys bind-mounted read-only, in a private mount
    # namespace of a child process so that nothing else sees it.
    script = (
        "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && "
        f"exec {ZEROLAYER} tune "
        f"--profile inf2 --netns {ns} --state-dir {tmp_path} --json --strict"
    )
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    out = json.loads(done.stdout)
    skipped = [s for s in out["steps"] if s["reason"].startswith("EROFS")]
    assert skipped and skipped[0]["knob"] == "net.ipv4.tcp_fastopen"
    assert out["preflight"]["proc_sys_writable"] is False
    assert done.stderr.count("\n") == 1 and "EROFS" in done.stderr


def test_inf2_refuses_aslr_and_ipv6_and_touches_neither(ns, tmp_path):
    aslr = sysctl(ns, "kernel.randomize_va_space")
    report = engine.apply(profile.load("inf2"), netns=ns, state_dir=tmp_path)
    rows = {row.knob: row for row in report.rows}
    assert rows["kernel.randomize_va_space"].status == "refused"
    assert rows["kernel.randomize_va_space"].before == aslr
    assert rows["net.ipv6.conf.all.disable_ipv6"].status == "refused"
    assert sysctl(ns, "kernel.randomize_va_space") == aslr
    assert sysctl(ns, "net.ipv6.conf.all.disable_ipv6") == "0"
    engine.revert(netns=ns, state_dir=tmp_path)


def test_inf2_in_a_netns_then_revert_leaves_it_identical(ns, tmp_path):
    before = ns_state(ns)
    report = engine.apply(profile.load("inf2"), netns=ns, interfaces=["zv0", "zq0"],
                          state_dir=tmp_path)
    done = statuses(report)
    for knob in ("net.ipv4.tcp_fastopen", "net.ipv4.tcp_autocorking"):
        assert done[knob] == "applied", report.to_json()
    # Global knobs are named, and left alone, with --netns.
    for knob in ("net.core.busy_read", "net.core.rmem_max", "cpufreq scaling_governor",
                 "zv0 irq affinity", "net.core.default_qdisc"):
        assert done[knob] == "skipped"
    assert all(row.reason.startswith("global knob") for row in report.rows
               if row.scope == "global")
    assert ns_state(ns) != before

    assert engine.verify(netns=ns, state_dir=tmp_path).error is None
    engine.revert(netns=ns, state_dir=tmp_path)
    assert ns_state(ns) == before


PFIFO = ("q", {"kind": "qdisc", "value": "pfifo"})


def test_root_qdisc_is_replaced_and_given_back_exactly(ns, tmp_path):
    # pfifo is in every kernel, so a profile asking for it shows the
    # mechanism: the veth's noqueue and the ifb's mq children (the kernel's
    # default qdisc) are replaced, and revert gives both back (handle 0:).
    prof = load_profile(tmp_path, "q", PFIFO)
    before = qdiscs(ns)
    report = engine.apply(prof, netns=ns, interfaces=["zv0", "zq0"], state_dir=tmp_path)
    rows = {row.knob: row for row in report.rows}
    assert (rows["zv0 root qdisc"].before, rows["zv0 root qdisc"].after) == ("noqueue", "pfifo")
    with open("/proc/sys/net/core/default_qdisc") as f:
        default = f.read().strip()  # pfifo_fast, or fq_codel on Debian's kernels
    assert (rows["zq0 root qdisc"].before, rows["zq0 root qdisc"].after) == (
        f"mq/{default}", "mq/pfifo")
    assert "limit 1000p" in qdiscs(ns)  # the kernel's default limit, no parameters sent
    assert qdiscs(ns) != before

    undo = engine.revert(netns=ns, state_dir=tmp_path)
    assert [row.knob for row in undo.rows] == ["zq0 root qdisc", "zv0 root qdisc"]
    assert qdiscs(ns) == before


def test_a_configured_root_qdisc_is_left_alone(ns, tmp_path):
    subprocess.run(["tc", "-n", ns, "qdisc", "replace", "dev", "zv0", "root", "handle",
                    "1:", "htb"], check=True)
    prof = load_profile(tmp_path, "q", PFIFO)
    report = engine.apply(prof, netns=ns, interfaces=["zv0"], strict=True,
                          state_dir=tmp_path)
    row = report.rows[0]
    assert row.status == "skipped" and "configured root qdisc (htb 1:)" in row.reason
    assert report.error is None  # not missing: zerolayer chose not to
    assert "htb 1:" in qdiscs(ns)


def test_netns_apply_touches_nothing_outside_it(tmp_path):
    with namespace() as target, namespace() as bystander:
        host_before = sysctl_all()
        host_qdiscs = qdiscs(None)
        host_nic = {
            path: open(path).read()
            for dev in os.listdir("/sys/class/net")
            for path in (f"/sys/class/net/{dev}/napi_defer_hard_irqs",
                         f"/sys/class/net/{dev}/gro_flush_timeout")
            if os.path.exists(path)
        }
        host_irqs = {
            irq: open(f"/proc/irq/{irq}/smp_affinity_list").read()
            for irq in os.listdir("/proc/irq")
            if os.path.exists(f"/proc/irq/{irq}/smp_affinity_list")
        }
        bystander_before = ns_state(bystander)

        for name in profile.shipped():
            engine.apply(profile.load(name), netns=target, interfaces=["zv0", "zq0"],
                         state_dir=tmp_path)
        assert ns_state(target) != ns_state(bystander)

        assert diff(host_before, sysctl_all()) == []
        assert qdiscs(None) == host_qdiscs
        assert {p: open(p).read() for p in host_nic} == host_nic
        assert {i: open(f"/proc/irq/{i}/smp_affinity_list").read()
                for i in host_irqs} == host_irqs
        assert ns_state(bystander) == bystander_before
        engine.revert(netns=target, state_dir=tmp_path)


def test_state_of_a_recreated_namespace_is_stale(tmp_path):
    prof = netns_profile(tmp_path, ("net.ipv4.tcp_fastopen", "3"))
    with namespace(with_devices=False) as name:
        engine.apply(prof, netns=name, state_dir=tmp_path)
    from pyxdp.kernel import netns

    netns.create(name)  # same name, a different namespace
    try:
        with pytest.raises(ZerolayerError, match="earlier namespace of the same name"):
            engine.revert(netns=name, state_dir=tmp_path)
        report = engine.apply(prof, netns=name, state_dir=tmp_path)
        assert report.notes and "discarded" in report.notes[0]
        assert statuses(report) == {"net.ipv4.tcp_fastopen": "applied"}
        engine.revert(netns=name, state_dir=tmp_path)
    finally:
        netns.remove(name)


def test_revert_with_nothing_recorded_says_so(ns, tmp_path):
    report = engine.revert(netns=ns, state_dir=tmp_path / "state")
    assert report.rows == [] and report.error is None
    assert report.notes[0].startswith("nothing to revert")
    with pytest.raises(ZerolayerError, match="nothing to verify"):
        engine.verify(netns=ns, state_dir=tmp_path / "state")
    assert not (tmp_path / "state").exists()


def test_unknown_interface_and_namespace_fail_with_one_line(ns, tmp_path):
    with pytest.raises(ZerolayerError, match="no interface 'nope0'"):
        engine.apply(profile.load("inf2"), netns=ns, interfaces=["nope0"],
                     state_dir=tmp_path)
    with pytest.raises(ZerolayerError, match="does not exist"):
        engine.apply(profile.load("inf2"), netns="zl-no-such-ns", state_dir=tmp_path)
