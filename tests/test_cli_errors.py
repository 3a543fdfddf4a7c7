# SPDX-License-Identifier: Apache-2.0
"""Expected failures: one line on stderr saying what to do, exit 1, never a
traceback. Each condition is real: an unprivileged user, a mount namespace
without headers or without bpffs, a verifier that says no."""

import json
import os
import re
import shutil
import subprocess

import pytest

from pyxdp.xdp import compiler, pins
from support.cli_runner import ZEROLAYER
from support.xdp_helpers import one_line_error

pytestmark = pytest.mark.root


def run_as(cmd: list[str], prefix: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(prefix + cmd, capture_output=True, text=True, timeout=120, **kwargs)


@pytest.mark.parametrize("args", [["status"], ["stats", "lo"], ["attach", "lo"], ["detach", "lo"]])
def test_not_root(args):
    proc = run_as([ZEROLAYER, *args], ["setpriv", "--reuid=65534", "--regid=65534",
                                       "--clear-groups", "--inh-caps=-all"])
    assert "needs root" in one_line_error(proc)


@pytest.mark.parametrize("args", [["attach", "zl-nosuch0"], ["stats", "zl-nosuch0"],
                                  ["detach", "zl-nosuch0"], ["status", "zl-nosuch0"]])
def test_no_such_interface(cli, args):
    assert "no interface named 'zl-nosuch0'" in one_line_error(cli(*args))


def test_no_such_netns(cli):
    assert "does not exist" in one_line_error(cli("status", "--netns", "zl-no-such-ns"))


def test_usage_errors_exit_2(cli):
    assert cli("attach").returncode == 2
    assert cli("attach", "lo", "--mode", "turbo").returncode == 2
    assert cli("attach", "lo", "--port", "70000").returncode == 2


def _in_private_mounts(script: str, lab) -> subprocess.CompletedProcess:
    """Run SCRIPT in a new mount namespace, so what it hides stays hidden
    from everything else on the machine."""
    return run_as(["sh", "-c", script], ["unshare", "--mount", "--propagation", "private"])


def test_no_program_needs_kernel_headers(lab):
    """Every program is a CO-RE object: with /lib/modules hidden, the XDP
    program attaches and the stream observer (the one that reads kernel
    structs) starts, reads and ends."""
    # a machine may have no /lib/modules at all: then nothing is there to hide
    hidden = "mount -t tmpfs none /lib/modules && " if os.path.isdir("/lib/modules") else ""
    proc = _in_private_mounts(hidden + f"exec {ZEROLAYER} streams --duration 1 --json", lab)
    assert proc.returncode == 0, proc.stderr
    z = f"{ZEROLAYER} {{}} {lab.dut.ifname} --netns {lab.dut.netns}"
    proc = _in_private_mounts(hidden + f"{z.format('attach')} && {z.format('detach')}", lab)
    assert proc.returncode == 0, proc.stderr


def test_a_kernel_without_btf_is_refused_by_the_observer_in_one_line(lab):
    proc = _in_private_mounts(
        f"mount -t tmpfs none /sys/kernel/btf && exec {ZEROLAYER} streams --duration 1", lab)
    line = one_line_error(proc)
    assert "has no BTF (/sys/kernel/btf/vmlinux)" in line and "CONFIG_DEBUG_INFO_BTF" in line


def test_missing_bpffs(lab):
    proc = _in_private_mounts(
        f"umount /sys/fs/bpf && exec {ZEROLAYER} attach {lab.dut.ifname} --netns {lab.dut.netns}",
        lab)
    assert "bpffs is not mounted" in one_line_error(proc)


def _broken_sources(tmp_path, find: str, replace: str):
    src = tmp_path / "bpf"
    shutil.copytree(compiler.SOURCE_DIR, src, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    for path in src.iterdir():
        if not path.is_file():
            continue
        text = path.read_text()
        if find in text:
            path.write_text(text.replace(find, replace, 1))
            return src
    raise AssertionError(f"{find!r} not found in the C sources")


@pytest.mark.kernel
def test_verifier_rejection(cli, lab, tmp_path):
    # drop the bounds check before the Ethernet header is read
    src = _broken_sources(tmp_path, "if ((void *)(eth + 1) > data_end)\n\t\treturn -1;", "")
    line = one_line_error(cli("attach", lab.dut.ifname, "--netns", lab.dut.netns,
                              env={"ZEROLAYER_BPF_DIR": str(src), "PATH": "/usr/bin:/bin"}))
    assert "verifier rejected" in line
    log = re.search(r"verifier log: (\S+)", line).group(1)
    assert "invalid access to packet" in open(log).read()
    subprocess.run(["rm", "-f", log], check=True)
    assert not os.path.exists(pins.netns_dir(lab.dut.netns)), "a failed attach left pins"


@pytest.mark.kernel
def test_compile_error(cli, lab, tmp_path):
    src = _broken_sources(tmp_path, "c->packets++;", "c->packets++ oops;")
    line = one_line_error(cli("attach", lab.dut.ifname, "--netns", lab.dut.netns,
                              env={"ZEROLAYER_BPF_DIR": str(src), "PATH": "/usr/bin:/bin"}))
    assert "compiling xdp_token.bpf.c failed" in line and "error:" in line
    subprocess.run(["rm", "-f", re.search(r"full log: (\S+)\)", line).group(1)], check=True)


def test_inside_ip_netns_exec_points_to_netns_option(lab):
    proc = run_as([ZEROLAYER, "status"], ["ip", "netns", "exec", lab.dut.netns])
    assert "--netns" in one_line_error(proc)


def test_read_only_bpffs_changes_nothing(lab, tmp_path):
    """A bpffs of its own, in a private mount namespace, attached to and
    then remounted read-only: attach and detach refuse in one line, and
    detach leaves the program and every pin in place."""
    z = f"{ZEROLAYER} {{}} {lab.dut.ifname} --netns {lab.dut.netns}"
    pin_dir = pins.pin_dir(lab.dut.ifname, lab.dut.netns)
    script = " && ".join([
        "mount -t bpf bpf /sys/fs/bpf",
        f"{z.format('attach')} >/dev/null",
        "mount -o remount,ro /sys/fs/bpf",
        f"{{ {z.format('detach')} 2>{tmp_path}/detach.err; echo $? >{tmp_path}/detach.rc; }}",
        f"{{ {z.format('attach')} 2>{tmp_path}/attach.err; echo $? >{tmp_path}/attach.rc; }}",
        f"ls {pin_dir} >{tmp_path}/pins",
        f"ip -n {lab.dut.netns} -j link show {lab.dut.ifname} >{tmp_path}/link.json",
        "mount -o remount,rw /sys/fs/bpf",
        f"{z.format('detach')} >/dev/null",
    ])
    proc = _in_private_mounts(script, lab)
    assert proc.returncode == 0, proc.stderr
    for command in ("detach", "attach"):
        err = (tmp_path / f"{command}.err").read_text()
        assert (tmp_path / f"{command}.rc").read_text().strip() == "1", err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert "read-only" in err and "remount,rw" in err and "nothing was changed" in err
    assert sorted((tmp_path / "pins").read_text().split()) == sorted([pins.PROG, *pins.MAPS])
    link = json.loads((tmp_path / "link.json").read_text())[0]
    assert link.get("xdp", {}).get("prog", {}).get("name") == "zerolayer_xdp", link


def test_netns_without_cap_sys_admin_says_so(cli, lab):
    """Exactly the capabilities the root message names (CAP_BPF,
    CAP_NET_ADMIN): entering a namespace needs CAP_SYS_ADMIN too."""
    cli("attach", lab.dut.ifname, "--netns", lab.dut.netns, check=True)
    try:
        caps = "+bpf,+net_admin"
        proc = run_as([ZEROLAYER, "stats", lab.dut.ifname, "--netns", lab.dut.netns],
                      ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                       f"--inh-caps={caps}", f"--ambient-caps={caps}"])
        line = one_line_error(proc)
        assert "CAP_SYS_ADMIN" in line and lab.dut.netns in line
    finally:
        cli("detach", lab.dut.ifname, "--netns", lab.dut.netns, check=True)


@pytest.mark.parametrize("args", [["emit", "lo", "--to", "198.18.0.1"],
                                  ["emit", "lo", "--to", "fd00::1:9977"],
                                  ["send", "localhost:9977"],
                                  ["serve", "--listen", "198.18.0.1:99999"],
                                  ["relay", "--listen", "127.0.0.1:0", "--upstream", "nowhere"]])
def test_bad_addr_port_is_a_usage_error(cli, args):
    proc = cli(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "ADDR:PORT" in proc.stderr or "address" in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_a_command_without_cap_sys_admin_says_which_capability_it_lacks():
    """What a confined service (a unit's CapabilityBoundingSet) runs into:
    reading an interface's program by id needs CAP_SYS_ADMIN; one line
    naming it, not a PermissionError."""
    from pyxdp.xdp import loader

    ifname = f"zlcs{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", ifname, "type", "veth", "peer", "name", f"{ifname}p"],
                   check=True)
    try:
        loader.attach(ifname)
        for argv in (["status", ifname], ["attach", ifname]):
            proc = subprocess.run(["setpriv", "--bounding-set=-sys_admin", "--", ZEROLAYER,
                                   *argv], capture_output=True, text=True, timeout=120)
            assert "CAP_SYS_ADMIN" in one_line_error(proc), proc.stderr
    finally:
        loader.detach(ifname)
        subprocess.run(["ip", "link", "del", ifname], capture_output=True)
