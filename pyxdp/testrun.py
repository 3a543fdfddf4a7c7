"""Packet in, verdict and counters out: zerolayer's program under
BPF_PROG_TEST_RUN, as Katran tests its balancer.

The program is loaded with private maps (nothing pinned, nothing attached),
so runs are isolated from any interface and from each other.
"""

from dataclasses import dataclass

from . import bpfsys, compiler, counters
from .frames import DEFAULT_PORT
from .maps import ZerolayerMaps

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
    """zerolayer's XDP program, loaded for test runs."""

    def __init__(self, ports=(DEFAULT_PORT,), on_malformed: str = "drop"):
        self._loaded = compiler.load(*compiler.TOKEN_PROGRAM, maps=compiler.TOKEN_MAPS)
        self.prog_fd = self._loaded.prog_fd
        self.maps = ZerolayerMaps.from_fds(self._loaded.map_fds)
        self.configure(ports, on_malformed)

    def configure(self, ports, on_malformed: str) -> None:
        self.maps.set_ports(ports)
        self.maps.set_on_malformed(on_malformed)
        self.ports = frozenset(ports)
        self.on_malformed = on_malformed

    def run(self, packet: bytes) -> Outcome:
        before = self.maps.read_counters()
        result = bpfsys.prog_test_run(self.prog_fd, packet)
        after = self.maps.read_counters()
        return Outcome(result.retval, result.data_out, counters.delta(after, before))

    def time_ns(self, packet: bytes, repeat: int) -> float:
        """The kernel's mean run time over REPEAT runs."""
        return bpfsys.prog_test_run(self.prog_fd, packet, repeat=repeat).duration_ns


class PassProgram:
    """The floor: a program that only returns XDP_PASS."""

    def __init__(self):
        self._loaded = compiler.load(*compiler.PASS_PROGRAM)
        self.prog_fd = self._loaded.prog_fd

    def time_ns(self, packet: bytes, repeat: int) -> float:
        return bpfsys.prog_test_run(self.prog_fd, packet, repeat=repeat).duration_ns
