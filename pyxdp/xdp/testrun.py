# SPDX-License-Identifier: Apache-2.0
"""Packet in, verdict and counters out: zerolayer's program under
BPF_PROG_TEST_RUN, as Katran tests its balancer.

By default the program is loaded with private maps (nothing pinned,
nothing attached), so runs are isolated from any interface. Given a pin dir,
it is the same object loaded once more with the maps pinned there, of the
generation in effect, so it acts as the attached one does: the attached one
may be an extension inside libxdp's dispatcher, which BPF_PROG_TEST_RUN
does not run.
"""

from dataclasses import dataclass

from pyxdp.kernel import bpfsys
from pyxdp.proto import counters
from pyxdp.proto.frames import DEFAULT_PORT
from pyxdp.xdp import compiler
from pyxdp.xdp.maps import ZerolayerMaps

ACTIONS = {0: "XDP_ABORTED", 1: "XDP_DROP", 2: "XDP_PASS", 3: "XDP_TX", 4: "XDP_REDIRECT"}


@dataclass(frozen=True)
class Outcome:
    action: int
    data_out: bytes
    counters: dict[str, int]  # deltas caused by this run

    @property
    def action_name(self) -> str:
        return ACTIONS.get(self.action, str(self.action))


class TokenProgram:
    """zerolayer's XDP program for test runs: loaded here with PORTS and
    ON_MALFORMED, or with the maps pinned in PIN_DIR, as configured there.
    close() when done."""

    def __init__(self, ports=(DEFAULT_PORT,), on_malformed: str = "drop",
                 pin_dir: str | None = None):
        if pin_dir:
            with ZerolayerMaps.open_pinned(pin_dir) as pinned:
                generation = pinned.generation()
            self._loaded = compiler.load_token(pin_dir, generation)
        else:
            self._loaded = compiler.load_token()
        self.prog_fd = self._loaded.prog_fd
        self.maps = ZerolayerMaps.from_fds(self._loaded.map_fds)
        if not pin_dir:
            self.configure(ports, on_malformed)

    def close(self) -> None:
        self._loaded.close()

    def configure(self, ports, on_malformed: str) -> None:
        self.maps.set_ports(ports)
        self.maps.set_on_malformed(on_malformed)

    def run(self, packet: bytes) -> Outcome:
        before = self.maps.read_counters()
        result = bpfsys.prog_test_run(self.prog_fd, packet)
        after = self.maps.read_counters()
        return Outcome(result.retval, result.data_out, counters.delta(after, before))
