# SPDX-License-Identifier: Apache-2.0
"""The benchmarks drive the generator from a background thread while they
measure. When that thread dies, the measurement must fail with the cause,
not report the silence that follows as 0 frames/s. The failure here is a
real one: the generator's interface is deleted, so the kernel refuses its
test runs (ENODEV)."""

import errno

import pytest
from pyroute2 import IPRoute

from pyxdp.bench import xdp_path
from pyxdp.bench.delivery import xsk_vs_udp
from pyxdp.bench.floors import CountProgram
from pyxdp.errors import ZerolayerError
from pyxdp.lab import generator
from pyxdp.xdp import ownership, pins
from pyxdp.xdp.testrun import TokenProgram
from support.xdp_helpers import live_generator

pytestmark = pytest.mark.root

GONE = "gone0"


@pytest.fixture
def orphan_generator(attached):
    """A generator made for an interface of the lab's peer namespace that
    has been deleted since."""
    with attached.in_peer(), IPRoute() as ipr:
        ipr.link("add", ifname=GONE, kind="veth", peer=f"{GONE}p")
    gen = live_generator(GONE, attached.peer.netns)
    with attached.in_peer(), IPRoute() as ipr:
        ipr.link("del", index=ipr.link_lookup(ifname=GONE)[0])
    return gen


def assert_failed_with_enodev(excinfo) -> None:
    assert str(excinfo.value).startswith("the generator thread failed: ")
    assert "No such device" in str(excinfo.value)
    assert "\n" not in str(excinfo.value)
    assert isinstance(excinfo.value.__cause__, OSError)
    assert excinfo.value.__cause__.errno == errno.ENODEV


def test_delivery_measurement_fails_when_its_generator_thread_dies(attached, orphan_generator):
    with pytest.raises(ZerolayerError) as excinfo:
        xsk_vs_udp.run(1000, lab=attached, generator=orphan_generator)
    assert_failed_with_enodev(excinfo)


def test_xdp_path_measurement_fails_when_its_generator_thread_dies(attached, orphan_generator):
    lab = attached
    token = TokenProgram(pin_dir=pins.pin_dir(lab.dut.ifname, lab.dut.netns))
    mix = generator.Mix.single(generator.token_mix(lab).templates[0])
    with pytest.raises(ZerolayerError) as excinfo:
        try:
            xdp_path.measure(lab, token, CountProgram(), orphan_generator, mix, rounds=3,
                             settle_s=0.01, window_s=0.05, chunk=1000)
        finally:
            token.close()
    assert_failed_with_enodev(excinfo)
    # The measurement put zerolayer's program back on dut0 on its way out.
    assert ownership.inspect(lab.dut.ifname, lab.dut.netns).ours
