"""Expected failures: one line on stderr saying what to do, exit 1, never a
traceback. Each condition is real: an unprivileged user, a mount namespace
without headers or without bpffs, a verifier that says no."""

import os
import re
import shutil
import subprocess

import pytest

from cli_runner import ZEROLAYER
from pyxdp.xdp import compiler, pins
from xdp_helpers import one_line_error

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


def test_missing_kernel_headers(lab):
    proc = _in_private_mounts(
        "mount -t tmpfs none /lib/modules && "
        f"exec {ZEROLAYER} attach {lab.dut.ifname} --netns {lab.dut.netns}", lab)
    assert "no kernel headers" in one_line_error(proc)


def test_missing_bpffs(lab):
    proc = _in_private_mounts(
        f"umount /sys/fs/bpf && exec {ZEROLAYER} attach {lab.dut.ifname} --netns {lab.dut.netns}",
        lab)
    assert "bpffs is not mounted" in one_line_error(proc)


def _broken_sources(tmp_path, find: str, replace: str):
    src = tmp_path / "bpf"
    shutil.copytree(compiler.SOURCE_DIR, src, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    for path in src.iterdir():
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
    assert "compiling xdp_token.c failed" in line and "error:" in line
    subprocess.run(["rm", "-f", re.search(r"full log: (\S+)\)", line).group(1)], check=True)


def test_inside_ip_netns_exec_points_to_netns_option(lab):
    proc = run_as([ZEROLAYER, "status"], ["ip", "netns", "exec", lab.dut.netns])
    assert "--netns" in one_line_error(proc)
