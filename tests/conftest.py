"""Shared fixtures. The suite needs root and a real kernel: it loads XDP
programs, makes network namespaces and veth pairs, and removes all of it,
on failure too. Names carry this process's pid, so parallel runs never
collide and leftovers of a killed run can be swept."""

import os
import subprocess
import sys

import pytest

from pyxdp import lab as lab_mod
from pyxdp import pins

ZEROLAYER = os.path.join(os.path.dirname(sys.executable), "zerolayer")

pytest_plugins = ["capabilities"]


def pytest_sessionstart(session):
    if os.geteuid() != 0:
        pytest.exit("the zerolayer tests need root: run `bash vagrant/provision.sh test` as root", 2)
    lab_mod.sweep_stale()


def _ours() -> set[str]:
    prefix = f"{lab_mod.PREFIX}{os.getpid()}-"
    names = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    names |= set(pins.pinned_netns())
    return {n for n in names if n.startswith(prefix)}


@pytest.fixture(autouse=True, scope="session")
def no_leftovers():
    """Fail the run if any test left a namespace or a pin dir behind."""
    yield
    left = _ours()
    for name in left:  # clean up anyway, then report
        lab_mod.netns.remove(name)
        pins.remove_netns_tree(name)
    assert not left, f"tests left namespaces or pins behind: {sorted(left)}"


@pytest.fixture
def lab():
    """A fresh two-namespace veth lab, removed after the test."""
    with lab_mod.Lab() as lab:
        yield lab


@pytest.fixture
def attached(lab):
    """A fresh lab with zerolayer attached to dut0, flow tracking on."""
    from pyxdp import loader

    loader.attach(lab.dut.ifname, flows=True, netns=lab.dut.netns)
    try:
        yield lab
    finally:
        loader.detach(lab.dut.ifname, lab.dut.netns)


@pytest.fixture(scope="session")
def token_program():
    """zerolayer's XDP program with private maps, for BPF_PROG_TEST_RUN."""
    from pyxdp.testrun import TokenProgram

    return TokenProgram()


def run_cli(*args, check=False, **kwargs) -> subprocess.CompletedProcess:
    """Run the installed `zerolayer` in a new process, as a user would."""
    proc = subprocess.run([ZEROLAYER, *map(str, args)], capture_output=True, text=True,
                          timeout=120, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"zerolayer {' '.join(map(str, args))} failed: {proc.stderr}")
    return proc


@pytest.fixture
def cli():
    return run_cli
