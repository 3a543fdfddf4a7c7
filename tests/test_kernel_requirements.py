"""On a kernel older than zerolayer needs, `attach` refuses in one line
that names what is missing and the version that has it. Only such a kernel
can show it: vagrant/vm boots Debian 11's 5.10 for this
(`bash vagrant/vm/run.sh --kernel 5.10 -- bash vagrant/provision.sh test
tests/test_kernel_requirements.py`); on newer kernels the test is skipped."""

import platform
import re

import pytest

from xdp_helpers import one_line_error

pytestmark = pytest.mark.root

# bpf_xdp_load_bytes, which the parser calls for headers past the
# direct-access window, came in 5.18: the oldest kernel zerolayer runs on.
NEEDED = (5, 18)


def _release() -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", platform.release()).groups()
    return int(major), int(minor)


@pytest.mark.kernel
@pytest.mark.skipif(_release() >= NEEDED, reason="this kernel has every helper zerolayer needs")
def test_a_kernel_too_old_is_refused_in_one_line(cli, lab):
    line = one_line_error(cli("attach", lab.dut.ifname, "--netns", lab.dut.netns))
    assert "bpf_xdp_load_bytes" in line and "Linux 5.18 or newer" in line, line
