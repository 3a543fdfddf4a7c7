# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures and helpers for the tuning tests (test_tuning_*.py).

Everything the tests change lives in a network namespace they create (named
as pyxdp.lab names them, removed even when a test fails, swept by conftest
after a killed run) or in a fake root under
tmp_path. `host_sysctls_unchanged` checks that the host's `sysctl -a` is the
same after the suite as before it.
"""

import contextlib
import json
import os
import shutil
import subprocess

import pytest

from pyxdp.kernel import netns
from pyxdp.lab import veth_lab as lab
from pyxdp.tuning import profile as profiles
from pyxdp.tuning.sysctl import SYSCTL_NAME
from support.cli_runner import ZEROLAYER  # noqa: F401 (re-exported to the tuning tests)

# sysctls that change on their own while anything runs, each for a reason
# unrelated to tuning: dentry/inode/file-handle counters move with every file
# opened, ns_last_pid with every process started, random.uuid is new on
# each read and entropy_avail drifts with use, pty.nr counts the terminals
# open (tmux in test_top, anyone's ssh); fs.quota.* are statistics
# that move with any other process's disk activity. The congestion-control
# lists grow when the kernel loads a module on demand (Debian builds bbr as
# one) for a test namespace that asks for it: a module, not a setting.
# Before Linux 5.13, kernel.sched_domain.* (in debugfs since) lists the
# scheduler's own load-balancing statistics (max_newidle_lb_cost decays and
# grows as the CPUs idle), which no tuning writes. kernel.tainted records
# that the kernel printed a warning (5.10's sockmap warns in strp_done when
# it frees a socket's stream parser): a state, not a setting, and
# vagrant/vm/conformance.sh prints the warning itself.
CHURNING_PREFIXES = ("fs.quota.", "kernel.sched_domain.")
CHURNING = {
    "net.ipv4.tcp_allowed_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
    "fs.dentry-state",
    "fs.file-nr",
    "fs.inode-nr",
    "fs.inode-state",
    "kernel.ns_last_pid",
    "kernel.pty.nr",
    "kernel.random.entropy_avail",
    "kernel.random.uuid",
    "kernel.tainted",
}


def sysctl_all(ns: str | None = None) -> dict[str, str]:
    """`sysctl -a` of the host, or of netns NS, minus the churning keys."""
    command = ["sysctl", "-a"]
    if ns is not None:
        command = ["ip", "netns", "exec", ns, *command]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    values = {}
    for line in out.splitlines():
        key, _, value = line.partition(" = ")
        if key not in CHURNING and not key.startswith(CHURNING_PREFIXES):
            values[key] = value
    return values


def diff(before: dict, after: dict) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [f"{k}: {before.get(k)!r} -> {after.get(k)!r}"
            for k in keys if before.get(k) != after.get(k)]


@pytest.fixture(scope="session", autouse=True)
def host_sysctls_unchanged():
    before = sysctl_all()
    yield
    changed = diff(before, sysctl_all())
    assert not changed, "the tuning tests changed host sysctls:\n" + "\n".join(changed)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextlib.contextmanager
def namespace(with_devices: bool = True):
    """A throwaway netns; with_devices adds veth zv0 (up, noqueue root) and a
    two-queue ifb zq0 (up, mq root), the two shapes a root qdisc can have."""
    name = lab.unique_netns_name("tune")
    netns.create(name)
    try:
        if with_devices:
            ip("-n", name, "link", "add", "zv0", "type", "veth", "peer", "name", "zv1")
            # Where ifb is a module (Debian's kernels), loading it makes ifb0
            # and ifb1 on the host unless told not to. (No modprobe, no modules.)
            if shutil.which("modprobe"):
                subprocess.run(["modprobe", "-q", "ifb", "numifbs=0"], check=False)
            ip("-n", name, "link", "add", "zq0", "numtxqueues", "2", "type", "ifb")
            for dev in ("zv0", "zv1", "zq0"):
                ip("-n", name, "link", "set", dev, "up")
        yield name
    finally:
        netns.remove(name)


@pytest.fixture
def ns():
    with namespace() as name:
        yield name


def qdiscs(ns: str | None) -> str:
    command = ["tc", "qdisc", "show"]
    if ns is not None:
        command[1:1] = ["-n", ns]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def ns_state(ns: str) -> tuple[dict, str, dict]:
    """Everything a netns-scoped tune may touch inside NS."""
    nic = {}
    for dev in ("zv0", "zq0"):
        for attr in ("napi_defer_hard_irqs", "gro_flush_timeout"):
            out = subprocess.run(
                ["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{dev}/{attr}"],
                capture_output=True, text=True, check=True).stdout
            nic[f"{dev}/{attr}"] = out.strip()
    return sysctl_all(ns), qdiscs(ns), nic


def write_profile(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def profile_text(name: str, *steps: tuple[str, dict], include: str | None = None) -> str:
    """A profile's TOML: one step per (id, knob), the knob a dict of its fields,
    after `include = INCLUDE` if given."""
    lines = [f"name = {json.dumps(name)}"]
    if include is not None:
        lines.append(f"include = {json.dumps(include)}")
    for step_id, knob in steps:
        lines += ["[[step]]", f"id = {json.dumps(step_id)}", f'why = "test step {step_id}"',
                  "  [[step.knob]]"]
        lines += [f"  {key} = {json.dumps(value)}" for key, value in knob.items()]
    return "\n".join(lines) + "\n"


def netns_sysctl(name: str, value: str) -> dict:
    return {"kind": "sysctl", "name": name, "value": value, "scope": "netns"}


def run_cli(*args: str, check_rc: int | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([ZEROLAYER, "tune", *args], capture_output=True, text=True,
                          timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    if check_rc is not None:
        assert done.returncode == check_rc, (done.returncode, done.stdout, done.stderr)
    return done


# --- the fake root ------------------------------------------------------------

FAKE_NIC = "fake0"


def shipped_sysctls() -> set[str]:
    """Every sysctl any shipped profile reads or writes."""
    names = {"net.core.default_qdisc", "net.ipv4.tcp_available_congestion_control"}
    for name in profiles.shipped():
        for step in profiles.load(name).steps:
            for spec in step.knobs:
                if spec.kind in ("sysctl", "refuse") or (
                        spec.kind == "note" and SYSCTL_NAME.match(spec["name"])):
                    names.add(spec["name"])
    return names


def make_fake_root(base) -> str:
    """A copy of what the shipped profiles touch: the host's sysctl values,
    plus a made-up machine with cpufreq, four idle states, two NUMA nodes and
    a NIC on node 1 with two MSI IRQs."""
    root = base / "root"

    def put(relative: str, content: str) -> None:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + "\n")

    for name in shipped_sysctls():
        # Only what this kernel has, and this user may read (bpf_jit_limit is
        # root's alone): a missing file stands for a sysctl the kernel lacks.
        try:
            with open("/proc/sys/" + name.replace(".", "/")) as f:
                put("proc/sys/" + name.replace(".", "/"), f.read().rstrip("\n"))
        except (FileNotFoundError, PermissionError):
            pass

    put("sys/devices/system/cpu/online", "0-1")
    for cpu in (0, 1):
        base_dir = f"sys/devices/system/cpu/cpu{cpu}"
        put(f"{base_dir}/cpufreq/scaling_governor", "powersave")
        put(f"{base_dir}/cpufreq/scaling_available_governors", "performance powersave")
        for index, (state, latency) in enumerate(
                [("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 133)]):
            put(f"{base_dir}/cpuidle/state{index}/name", state)
            put(f"{base_dir}/cpuidle/state{index}/latency", str(latency))
            put(f"{base_dir}/cpuidle/state{index}/disable", "0")
    put("sys/devices/system/node/node0/cpulist", "0")
    put("sys/devices/system/node/node1/cpulist", "1")

    pci = "sys/devices/pci0000:00/0000:00:03.0"
    put(f"{pci}/numa_node", "1")
    for irq in (40, 41):
        put(f"{pci}/msi_irqs/{irq}", "msix")
        put(f"proc/irq/{irq}/smp_affinity_list", "0-1")
    put(f"{pci}/virtio2/vendor", "0x1af4")
    nic = f"sys/class/net/{FAKE_NIC}"
    put(f"{nic}/napi_defer_hard_irqs", "0")
    put(f"{nic}/gro_flush_timeout", "0")
    os.symlink("../../../devices/pci0000:00/0000:00:03.0/virtio2", root / nic / "device")
    return str(root)


def tree(root: str) -> dict[str, bytes]:
    """Every file under ROOT/proc and ROOT/sys, with its bytes."""
    files = {}
    for top in ("proc", "sys"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, root)] = f.read()
    return files
