# SPDX-License-Identifier: Apache-2.0
"""zerolayer's maps, opened from pins (a fresh process) or from fds (a
program libbpf just loaded), with typed access.

The layouts below are the Python side of bpf/zl_structs.h, checked against
the C by tests/test_layouts.py; the constants are the C's (the loader
passes them in, docs/spec.md §7.2). open() checks the kernel's key and
value sizes so that maps pinned by another zerolayer version are refused,
not misread.
"""

import os
import re
import struct
from dataclasses import dataclass

from pyxdp.cstruct import Layout
from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys, rcu
from pyxdp.proto import counters
from pyxdp.xdp import pins

POLICIES = ("drop", "pass")  # on_malformed: the index is the value (ZL_MALFORMED_*)
CONFIG_FLOWS = 1 << 0  # ZL_CONFIG_FLOWS: per-flow tracking on (off by default)
CONFIG_FORWARD = 1 << 1  # ZL_CONFIG_FORWARD: XDP forwarding on (off by default)
CONFIG_PORTS_HALF = 1 << 2  # ZL_CONFIG_PORTS_HALF: the second half of `ports` is in effect
# ZL_CONFIG_GENERATION_SHIFT: the flags' bits from here up are the
# generation of the program that acts (docs/spec.md §6.4)
CONFIG_GENERATION_SHIFT = 8
GENERATIONS = 1 << (32 - CONFIG_GENERATION_SHIFT)
# Token gaps in log2 microsecond buckets (ZL_GAP_BUCKETS, flows.gap_bucket).
GAP_BUCKETS = 22
# Map sizes (entries).
PORT_SLOTS = 65536  # ZL_PORT_SLOTS: every UDP port, in each half of `ports`
XSKS_MAX = 256  # ZL_XSKS_MAX: rx queues 0-255 can have an AF_XDP socket
FLOWS_MAX = 16384  # ZL_FLOWS_MAX: the flow table's capacity
EGRESS_MAX = 256  # interfaces the egress devmap holds (pyxdp/xdp/egress.py)
MAX_PORTS = 64

CONFIG = Layout("zl_config", ("on_malformed", "I"), ("flags", "I"))
FLOW_KEY = Layout(
    "zl_flow_key",
    ("saddr", "16s"),  # network order; IPv4 in the first 4 bytes
    ("sport", "H"),
    ("dport", "H"),
    ("ip_version", "B"),
    ("pad", "3x"),
)
FLOW = Layout(
    "zl_flow",
    ("frames", f"{len(counters.FRAME_LABELS)}Q"),
    ("payload_bytes", "Q"),
    ("datagrams", "Q"),
    ("first_ns", "Q"),
    ("last_ns", "Q"),
    ("last_token_ns", "Q"),
    ("gap_sum_ns", "Q"),
    ("gaps", f"{GAP_BUCKETS}Q"),
)
GAP_HIST = Layout("zl_gap_hist", ("sum_ns", "Q"), ("buckets", f"{GAP_BUCKETS}Q"))
KEY = struct.Struct("=I")  # the array maps' key
_IN_SET = re.compile(b"[^\0]")  # a port set's slot holding a port


@dataclass(frozen=True)
class MapSpec:
    key_size: int
    value_size: int
    max_entries: int | None  # None: any


SPECS = {
    "counters": MapSpec(4, counters.LAYOUT.size, 1),
    "config": MapSpec(4, CONFIG.size, 1),
    "ports": MapSpec(4, 1, 2 * PORT_SLOTS),  # two halves (set_ports)
    "xsks": MapSpec(4, 4, None),
    "xsks_sg": MapSpec(4, 1, XSKS_MAX),  # non-zero: the queue's socket takes XDP_USE_SG
    "flows": MapSpec(FLOW_KEY.size, FLOW.size, None),
    "gaps": MapSpec(4, GAP_HIST.size, 1),
    "egress": MapSpec(4, 4, EGRESS_MAX),  # DEVMAP_HASH: ifindex -> ifindex
}


class BpfMap:
    """One map fd and what the kernel says about it."""

    def __init__(self, fd: int, name: str, owned: bool = True):
        self.fd = fd
        self.name = name
        self.info = bpfsys.map_info(fd)
        self._owned = owned

    def check(self, spec: MapSpec) -> None:
        i = self.info
        if (i.key_size, i.value_size) != (spec.key_size, spec.value_size) or (
            spec.max_entries is not None and i.max_entries != spec.max_entries
        ):
            raise ZerolayerError(
                f"pinned map '{self.name}' has another layout (from another zerolayer "
                "version?): detach and attach again"
            )

    def lookup(self, key: int, value_size: int | None = None) -> bytes | None:
        return bpfsys.map_lookup(self.fd, KEY.pack(key), value_size or self.info.value_size)

    def element(self, index: int, value_size: int | None = None) -> bytes:
        """An array's element: arrays have every index below max_entries."""
        raw = self.lookup(index, value_size)
        if raw is None:
            raise ZerolayerError(f"map {self.name} has no element {index}")
        return raw

    def update(self, key: int, value: bytes) -> None:
        bpfsys.map_update(self.fd, KEY.pack(key), value)

    def delete(self, key: int) -> bool:
        return bpfsys.map_delete(self.fd, KEY.pack(key))

    def close(self) -> None:
        if self._owned and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1


class ZerolayerMaps:
    """counters, config, ports and xsks of one attached program."""

    def __init__(self, maps: dict[str, BpfMap]):
        for name, spec in SPECS.items():
            maps[name].check(spec)
        self._maps = maps

    @classmethod
    def open_pinned(cls, pin_dir: str) -> "ZerolayerMaps":
        opened: dict[str, BpfMap] = {}
        try:
            for name in pins.MAPS:
                path = os.path.join(pin_dir, name)
                try:
                    opened[name] = BpfMap(bpfsys.obj_get(path), name)
                except FileNotFoundError:
                    raise ZerolayerError(
                        f"{path} is missing: the pins are incomplete; "
                        "detach and attach again"
                    ) from None
            return cls(opened)
        except BaseException:
            for m in opened.values():
                m.close()
            raise

    @classmethod
    def from_fds(cls, fds: dict[str, int]) -> "ZerolayerMaps":
        """Borrow fds owned by someone else (a loaded program's object)."""
        return cls({name: BpfMap(fd, name, owned=False) for name, fd in fds.items()})

    def __getitem__(self, name: str) -> BpfMap:
        return self._maps[name]

    def close(self) -> None:
        for m in self._maps.values():
            m.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- counters ---------------------------------------------------------------

    def read_counters(self) -> dict[str, int]:
        ncpus = bpfsys.possible_cpus()
        raw = self["counters"].element(0, counters.LAYOUT.size * ncpus)
        return counters.from_percpu(raw, ncpus)

    # --- config -------------------------------------------------------------------

    def _config(self) -> tuple[int, int]:
        return CONFIG.unpack(self["config"].element(0))

    def on_malformed(self) -> str:
        policy, _ = self._config()
        return POLICIES[policy] if policy < len(POLICIES) else f"unknown({policy})"

    def set_on_malformed(self, policy: str) -> None:
        _, flags = self._config()
        self["config"].update(0, CONFIG.pack(POLICIES.index(policy), flags))

    def flows_enabled(self) -> bool:
        return bool(self._config()[1] & CONFIG_FLOWS)

    def set_flows_enabled(self, enabled: bool) -> None:
        self._set_flag(CONFIG_FLOWS, enabled)

    def forward_enabled(self) -> bool:
        return bool(self._config()[1] & CONFIG_FORWARD)

    def set_forward_enabled(self, enabled: bool) -> None:
        self._set_flag(CONFIG_FORWARD, enabled)

    def _set_flag(self, flag: int, enabled: bool) -> None:
        policy, flags = self._config()
        flags = flags | flag if enabled else flags & ~flag
        self["config"].update(0, CONFIG.pack(policy, flags))

    def generation(self) -> int:
        """The generation of the program that acts (docs/spec.md §6.4)."""
        return self._config()[1] >> CONFIG_GENERATION_SHIFT

    def set_generation(self, generation: int) -> None:
        """Hand the work to the program of GENERATION, in one write."""
        policy, flags = self._config()
        low = flags & ((1 << CONFIG_GENERATION_SHIFT) - 1)
        self["config"].update(0, CONFIG.pack(policy, low | generation % GENERATIONS
                                             << CONFIG_GENERATION_SHIFT))

    def _ports_half(self) -> int:
        return 1 if self._config()[1] & CONFIG_PORTS_HALF else 0

    def _half(self, half: int) -> set[int]:
        """The ports set in HALF of `ports`."""
        m = self["ports"]
        slots = bpfsys.array_values(m.fd, 1, m.info.max_entries)
        base = half * PORT_SLOTS
        return {m.start() - base for m in _IN_SET.finditer(slots, base, base + PORT_SLOTS)}

    def ports(self) -> list[int]:
        """The set in effect: the half the config names, read again if a
        flip came between reading the bit and reading the half."""
        while True:
            half = self._ports_half()
            found = self._half(half)
            if self._ports_half() == half:
                return sorted(found)

    def set_ports(self, wanted) -> None:
        """Make the token port set exactly WANTED, atomically for the
        program: write the half not in effect, then flip ZL_CONFIG_PORTS_HALF
        with one config write. That half was retired by the last flip, so
        first wait until no program run that read the old bit is left."""
        wanted = set(wanted)
        check_ports(wanted)
        spare = 1 - self._ports_half()
        base = spare * PORT_SLOTS
        rcu.wait_for_running_programs()
        current = self._half(spare)
        for port in sorted(wanted - current):
            self["ports"].update(base + port, b"\1")
        for port in sorted(current - wanted):
            self["ports"].update(base + port, b"\0")
        self._set_flag(CONFIG_PORTS_HALF, spare == 1)


def check_ports(ports) -> None:
    bad = [p for p in ports if not 1 <= p <= 65535]
    if bad:
        raise ZerolayerError(f"invalid UDP port {bad[0]}: use 1-65535")
    if not ports:
        raise ZerolayerError("at least one token port is needed")
    if len(ports) > MAX_PORTS:
        raise ZerolayerError(f"{len(ports)} token ports given: at most {MAX_PORTS}")
