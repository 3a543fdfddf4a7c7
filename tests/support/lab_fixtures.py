# SPDX-License-Identifier: Apache-2.0
"""Fixtures for tests on real kernels: veth labs in namespaces, zerolayer
attached, its program under BPF_PROG_TEST_RUN. Names carry this process's
pid, so parallel runs never collide and leftovers of a killed run can be
swept; everything made is removed, on failure too."""

import contextlib
import os

import pytest

from pyxdp.lab import veth_lab
from pyxdp.xdp import pins
from support.cli_runner import run_cli


def pytest_sessionstart(session):
    if os.geteuid() == 0:
        veth_lab.sweep_stale()


def _ours() -> set[str]:
    prefix = f"{veth_lab.PREFIX}{os.getpid()}-"
    names = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    names |= set(pins.pinned_netns())
    return {n for n in names if n.startswith(prefix)}


# libxdp's lock and dispatcher state, which it makes on its first attach and
# leaves behind, as it does for xdp-loader (pyxdp.xdp.dispatcher).
LIBXDP_DIR = "/sys/fs/bpf/xdp"


@pytest.fixture(autouse=True, scope="session")
def no_leftovers():
    """Fail the run if any test left a namespace or a pin dir behind; take
    libxdp's directory away again if the run made it and it is empty."""
    libxdp_dir_before = os.path.exists(LIBXDP_DIR)
    yield
    if os.geteuid() != 0:
        return  # an ordinary user made nothing to leave behind
    if not libxdp_dir_before:
        with contextlib.suppress(OSError):  # not empty: someone else's state is there
            os.rmdir(LIBXDP_DIR)
    left = _ours()
    for name in left:  # clean up anyway, then report
        veth_lab.netns.remove(name)
        pins.remove_netns_tree(name)
    assert not left, f"tests left namespaces or pins behind: {sorted(left)}"


@pytest.fixture
def lab():
    """A fresh two-namespace veth lab, removed after the test."""
    with veth_lab.Lab() as made:
        yield made


@pytest.fixture
def attached(lab):
    """A fresh lab with zerolayer attached to dut0, flow tracking on."""
    from pyxdp.xdp import loader

    loader.attach(lab.dut.ifname, flows=True, netns=lab.dut.netns)
    try:
        yield lab
    finally:
        loader.detach(lab.dut.ifname, lab.dut.netns)


@pytest.fixture(scope="module")
def module_lab():
    """One lab with zerolayer on dut0 for a whole module, whose tests read
    counter deltas rather than needing a fresh lab each."""
    from pyxdp.xdp import loader

    with veth_lab.Lab() as made:
        loader.attach(made.dut.ifname, netns=made.dut.netns)
        try:
            yield made
        finally:
            loader.detach(made.dut.ifname, made.dut.netns)


@pytest.fixture(scope="module")
def rig(module_lab):
    """module_lab, and one compiled generator on its peer0."""
    from support.xdp_helpers import live_generator

    return module_lab, live_generator(module_lab.peer.ifname, module_lab.peer.netns)


@pytest.fixture(scope="session")
def token_program():
    """zerolayer's XDP program with private maps, for BPF_PROG_TEST_RUN."""
    from pyxdp.xdp.testrun import TokenProgram

    program = TokenProgram()
    yield program
    program.close()


@pytest.fixture
def cli():
    return run_cli
