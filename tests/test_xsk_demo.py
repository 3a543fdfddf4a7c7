# SPDX-License-Identifier: Apache-2.0
"""`zerolayer demo` with its AF_XDP consumer, as a user runs it."""

import pytest

pytestmark = pytest.mark.root


@pytest.mark.kernel
def test_demo_streams_arrive_over_af_xdp_and_counters_match(cli):
    proc = cli("demo")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "AF_XDP socket on dut0 queue 0: copy mode" in out
    assert "streams received by the AF_XDP socket on dut0 queue 0 (copy mode;" in out
    assert ", 0 lost)" in out
    # Each stream's whole text, once it is DONE, and the judge's verdict.
    answer = "XDP sees the packet before the kernel allocates anything for it."
    assert f'DONE (11 tokens): "{answer}"' in out
    assert "every counter matches the reference judge" in out
    # ...and each stream's cadence as XDP measured it (values depend on timing:
    # only that every stream is there)
    assert "token cadence per stream, measured by XDP at the driver" in out
    section = out.split("token cadence per stream")[1].split("XDP counters")[0]
    assert sum(":4000" in line for line in section.splitlines()) == 4
