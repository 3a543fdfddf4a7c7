# SPDX-License-Identifier: Apache-2.0
"""A line-rate packet generator: BPF_PROG_TEST_RUN with
BPF_F_TEST_XDP_LIVE_FRAMES runs bpf/xdp_tx.bpf.c over template packets and
transmits every frame on a real interface, without a socket or an skb on the
way out. Run in the lab's peer namespace, it feeds dut0 faster than any
Python sender could.

A Mix is the traffic: up to 16 templates and a schedule saying which one
goes out at each position, cycled. The schedule interleaves the templates
evenly, so a 1% share of malformed datagrams arrives spread out, not in one
burst, and Mix.counts(n) says exactly how many of each the first N frames
hold. Asked for N frames the generator transmits exactly N (one per
repetition); whether they all arrive is the receiver's business, and what
the counters are for.

Pacing is by chunks: each BPF_PROG_TEST_RUN call with more than one
repetition costs tens of ms of setup in the kernel (it swaps the XDP
dispatcher and waits for RCU), so a target rate is met by sending chunks of
a tenth of a second's worth at full speed and sleeping between them.
GeneratorRun reports the rate actually achieved.

Signals. A signal that arrives during BPF_PROG_TEST_RUN ends the call with
EINTR at the next batch boundary (net/bpf/test_run.c checks
signal_pending() between batches), and the kernel reports nothing of the
frames it already sent. The program counts its own repetitions in its state
map, so the generator reads how far the call got and sends only the rest:
the total stays exact, and the schedule of a mix goes on from where it
stopped. A Python handler that raises (Ctrl-C) still ends the run.
"""

import errno
import functools
import platform
import struct
import time
from dataclasses import dataclass

from pyxdp.cstruct import Layout
from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys, netns
from pyxdp.lab import traffic
from pyxdp.proto import counters, frames, judge
from pyxdp.proto.ethernet import ETH_HLEN, LINK_L2_OVERHEAD
from pyxdp.xdp import compiler, netlink

GENERATOR_PROGRAM = ("xdp_tx.bpf.c", "xdp_tx_gen")
GENERATOR_MAPS = {"templates": "zl_gen_templates", "schedule": "zl_gen_schedule",
                  "state": "zl_gen_state"}
MAX_TEMPLATE_LEN = 1536  # ZL_GEN_MAX_LEN: >= 1500-byte MTU + Ethernet + two VLAN tags
MAX_TEMPLATES = 16  # ZL_GEN_TEMPLATES
MAX_SLOTS = 4096  # ZL_GEN_SLOTS: schedule slots

# Map values (bpf/xdp_tx.bpf.c): change both together (tests/test_layouts.py checks).
TEMPLATE = Layout("zl_gen_template", ("len", "I"), ("data", f"{MAX_TEMPLATE_LEN}s"))
STATE = Layout("zl_gen_state", ("slots", "I"), ("next", "I"), ("errors", "Q"), ("runs", "Q"))
INDEX = struct.Struct("=I")
# A test run's context: the kernel's struct xdp_md (uapi/linux/bpf.h).
XDP_MD = Layout(
    "xdp_md",
    ("data", "I"),
    ("data_end", "I"),
    ("data_meta", "I"),
    ("ingress_ifindex", "I"),
    ("rx_queue_index", "I"),
    ("egress_ifindex", "I"),
)


def c_defines() -> dict[str, int]:
    """The generator program's sizes, by C name (bpf/xdp_tx.bpf.c)."""
    return {"ZL_GEN_MAX_LEN": MAX_TEMPLATE_LEN, "ZL_GEN_TEMPLATES": MAX_TEMPLATES,
            "ZL_GEN_SLOTS": MAX_SLOTS}


GENERATOR_BUILD = compiler.shipped(GENERATOR_PROGRAM[0], compiler.define_flags(c_defines()))
GENERATOR_FUNCTION = GENERATOR_PROGRAM[1]


def load_program() -> compiler.Loaded:
    """bpf/xdp_tx.bpf.c compiled with its sizes and loaded, with private maps."""
    return compiler.load(GENERATOR_BUILD, GENERATOR_FUNCTION, maps=GENERATOR_MAPS)


# The kernel's limit on frames per batch (it allocates a page each).
MAX_BATCH = 256
# A paced run sends a tenth of a second's worth per call; a flat-out run
# sends big chunks so the per-call setup stays small against the work.
PACE_INTERVAL_S = 0.1
FLAT_OUT_CHUNK = 1 << 22
MIX_SLOTS = 1000  # mixes given as shares resolve to 0.1%


@dataclass(frozen=True)
class Mix:
    """Templates and the schedule that interleaves them (indexes, cycled).
    One template is sent as the frame already holds it, unless REWRITE:
    then, as with several, it is written over every frame. That costs a copy
    a frame, and is needed when something downstream changes frames in place
    (XDP forwarding decrements the TTL in the very page the generator
    recycles, so an unrestored frame would age one hop a round trip)."""

    templates: tuple[bytes, ...]
    schedule: tuple[int, ...]
    rewrite: bool = False

    def __post_init__(self):
        if not 1 <= len(self.templates) <= MAX_TEMPLATES:
            raise ZerolayerError(
                f"a mix holds 1-{MAX_TEMPLATES} templates, not {len(self.templates)}")
        if not 1 <= len(self.schedule) <= MAX_SLOTS:
            raise ZerolayerError(f"a schedule holds 1-{MAX_SLOTS} slots")
        if set(self.schedule) != set(range(len(self.templates))):
            raise ZerolayerError("every template of a mix must be scheduled, and nothing else")
        for t in self.templates:
            if not ETH_HLEN <= len(t) <= MAX_TEMPLATE_LEN:
                raise ZerolayerError(
                    f"a {len(t)}-byte template: the generator sends "
                    f"{ETH_HLEN}-{MAX_TEMPLATE_LEN} bytes"
                )

    @classmethod
    def single(cls, packet: bytes, rewrite: bool = False) -> "Mix":
        return cls((bytes(packet),), (0,), rewrite)

    @property
    def rewritten(self) -> bool:
        """Whether the program writes a template over every frame."""
        return self.rewrite or len(self.templates) > 1

    @classmethod
    def weighted(cls, weighted_templates, rewrite: bool = False) -> "Mix":
        """[(packet, weight)] with integer weights: the schedule is one cycle
        of sum(weights) slots, each template spread evenly over it (smooth
        weighted round robin)."""
        templates = tuple(bytes(p) for p, _ in weighted_templates)
        weights = [int(w) for _, w in weighted_templates]
        if any(w < 1 for w in weights) or sum(weights) > MAX_SLOTS:
            raise ZerolayerError(
                f"weights must be positive integers summing to at most {MAX_SLOTS}")
        if len(templates) == 1:
            return cls.single(templates[0], rewrite)
        total, current, schedule = sum(weights), [0] * len(weights), []
        for _ in range(total):
            for i, w in enumerate(weights):
                current[i] += w
            pick = max(range(len(weights)), key=lambda i: current[i])
            current[pick] -= total
            schedule.append(pick)
        return cls(templates, tuple(schedule))

    def counts(self, n: int) -> list[int]:
        """How many of each template the first N frames hold."""
        cycles, rest = divmod(n, len(self.schedule))
        out = [0] * len(self.templates)
        for pos, index in enumerate(self.schedule):
            out[index] += cycles + (1 if pos < rest else 0)
        return out

    def expected_counters(self, n: int, ports=(frames.DEFAULT_PORT,),
                          on_malformed: str = "drop") -> dict[str, int]:
        """What zerolayer's counters must read after N frames of this mix."""
        total = counters.zero()
        for template, times in zip(self.templates, self.counts(n)):
            delta = judge.expected(template, set(ports), on_malformed).counters
            for key, value in delta.items():
                total[key] += value * times
        return total


def token_payload(frames_per_datagram: int, payload_size: int) -> bytes:
    """A token datagram: FRAMES_PER_DATAGRAM TOKEN frames of PAYLOAD_SIZE bytes."""
    text = (b"tok " * (payload_size // 4 + 1))[:payload_size]
    return frames.encode(frames.FrameType.TOKEN, text) * frames_per_datagram


def token_mix(route, *, frames_per_datagram: int = 4, payload_sizes=(16,),
              port: int = frames.DEFAULT_PORT, malformed: float = 0.0, other: float = 0.0,
              sport: int = 40000, rewrite: bool = False) -> Mix:
    """Token datagrams from ROUTE's peer to its dut (a Lab, or anything with
    .peer and .dut endpoints), one template per payload size; MALFORMED of
    them (a share, 0-1) cycle through every malformed reason, and OTHER
    are UDP datagrams to a port that is not a token port. REWRITE: as Mix."""
    if not 1 <= frames_per_datagram <= frames.MAX_FRAMES:
        raise ZerolayerError(f"frames per datagram must be 1-{frames.MAX_FRAMES}")
    sizes = sorted(set(payload_sizes))
    if not sizes or sizes[0] < 0:
        raise ZerolayerError("payload sizes must be zero or more bytes")
    if malformed < 0 or other < 0 or malformed + other >= 1:
        raise ZerolayerError(
            "the malformed and other shares must be >= 0 and leave room for tokens")
    tokens = 1 - malformed - other
    # (packet, share)
    parts = [(traffic.udp_packet(route, token_payload(frames_per_datagram, s), sport=sport,
                                 dport=port), tokens / len(sizes)) for s in sizes]
    if malformed:
        bad = traffic.malformed_packets(route, sport=sport, dport=port)
        parts += [(p, malformed / len(bad)) for p in bad]
    if other:
        parts.append((traffic.udp_packet(route, b"not token traffic", sport=sport,
                                         dport=53 if port != 53 else 54), other))
    weights = _apportion([share for _, share in parts], MIX_SLOTS)
    return Mix.weighted([(bytes(packet), w) for (packet, _), w in zip(parts, weights)], rewrite)


def _apportion(shares: list[float], slots: int) -> list[int]:
    """Integer slot counts proportional to SHARES (largest remainder); any
    non-zero share gets at least one slot."""
    total = sum(shares)
    exact = [s / total * slots for s in shares]
    out = [max(int(x), 1 if s else 0) for x, s in zip(exact, shares)]
    by_remainder = sorted(range(len(shares)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in by_remainder[:max(0, slots - sum(out))]:
        out[i] += 1
    return out


@dataclass(frozen=True)
class GeneratorRun:
    sent: int
    elapsed_s: float
    target_pps: float | None  # None: flat out
    chunks: int
    interrupted: int = 0  # calls a signal cut short, whose rest was sent again

    @property
    def rate_pps(self) -> float:
        """The rate achieved: frames over the wall time of the whole run."""
        return self.sent / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_json(self) -> dict:
        return {"sent": self.sent, "elapsed_s": round(self.elapsed_s, 6),
                "target_pps": self.target_pps, "rate_pps": round(self.rate_pps, 1),
                "chunks": self.chunks, "interrupted": self.interrupted}


@functools.cache
def live_frames_refused() -> int:
    """0, or why this kernel sends nothing from XDP test runs (an errno;
    probed once per process)."""
    return bpfsys.live_frames_refused()


def live_frames() -> bool:
    """Whether this kernel sends from XDP test runs."""
    return live_frames_refused() == 0


def no_live_frames() -> str:
    if live_frames_refused() == errno.EPERM:
        what = (f"this kernel ({platform.release()}) refuses live-frames XDP test runs "
                "(BPF_F_TEST_XDP_LIVE_FRAMES: EPERM, this host's policy, not its version)")
    else:
        what = (f"this kernel ({platform.release()}) has no live-frames XDP test runs "
                "(BPF_F_TEST_XDP_LIVE_FRAMES, Linux 5.18)")
    return (what + ", which zerolayer's traffic generator sends with: the benches and tests "
            "that generate traffic with it cannot run here")


class LiveGenerator:
    """Transmit frames on IFNAME (inside NETNS)."""

    def __init__(self, ifname: str, netns_name: str | None = None):
        self.ifname = ifname
        self.netns = netns_name
        state = netlink.query(ifname, netns_name)
        if not live_frames():
            raise ZerolayerError(no_live_frames())
        self.ifindex = state.ifindex
        self.max_len = min(state.mtu + LINK_L2_OVERHEAD, MAX_TEMPLATE_LEN)
        self._loaded = load_program()
        self._maps = self._loaded.map_fds
        self._mix: Mix | None = None

    def send(self, packet: bytes, count: int, batch_size: int = 64) -> int:
        """Transmit COUNT copies of PACKET as fast as possible; returns COUNT."""
        return self.run(Mix.single(packet), count, batch_size=batch_size).sent

    def run(self, mix: Mix, count: int, *, rate: float | None = None,
            batch_size: int = 64) -> GeneratorRun:
        """Transmit COUNT frames of MIX, from the start of its schedule, at
        RATE frames/s (paced by chunks) or flat out."""
        if count < 0:
            raise ZerolayerError("the frame count must be zero or more")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ZerolayerError(f"batch size must be 1-{MAX_BATCH}")
        if rate is not None and rate <= 0:
            raise ZerolayerError("the target rate must be positive")
        self._load_mix(mix)
        chunk = max(1, int(rate * PACE_INTERVAL_S)) if rate else FLAT_OUT_CHUNK
        frame = max(mix.templates, key=len)
        ctx = XDP_MD.pack(0, len(frame), 0, self.ifindex, 0, 0)
        sent, chunks, interrupted, start = 0, 0, 0, time.monotonic()
        while sent < count:
            if rate:
                wait = start + sent / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            if not self._transmit(frame, ctx, min(chunk, count - sent), batch_size):
                interrupted += 1
            sent = self._state()["runs"]  # what the program ran, whole or cut short
            chunks += 1
        elapsed = time.monotonic() - start
        errors = self._state()["errors"]
        if errors:
            raise ZerolayerError(
                f"the generator program failed to build {errors} of {count} frames")
        return GeneratorRun(sent, elapsed, rate, chunks, interrupted)

    def _transmit(self, frame: bytes, ctx: bytes, n: int, batch_size: int) -> bool:
        """One live-frames test run of N repetitions: True when it ran them
        all, False when a signal cut it short (see the module docstring)."""
        # test_run resolves ingress_ifindex in the calling thread's netns.
        with netns.entered(self.netns):
            try:
                bpfsys.prog_test_run(
                    self._loaded.prog_fd, frame, repeat=n, ctx=ctx,
                    flags=bpfsys.BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=batch_size, out_size=0,
                )
            except InterruptedError:
                return False
        return True

    def _state(self) -> dict[str, int]:
        raw = bpfsys.map_lookup(self._maps["state"], INDEX.pack(0), STATE.size)
        assert raw is not None  # an array map has every index
        return dict(zip(STATE.value_names(), STATE.unpack(raw)))

    def _load_mix(self, mix: Mix) -> None:
        """Write MIX into the program's maps (templates only when they
        changed) and rewind its schedule."""
        for t in mix.templates:
            if len(t) > self.max_len:
                raise ZerolayerError(
                    f"a {len(t)}-byte frame does not fit {self.ifname}'s MTU "
                    f"({self.max_len - LINK_L2_OVERHEAD})"
                )
        if mix != self._mix:
            if mix.rewritten:
                for i, t in enumerate(mix.templates):
                    bpfsys.map_update(self._maps["templates"], INDEX.pack(i),
                                      TEMPLATE.pack(len(t), t))
                for pos, index in enumerate(mix.schedule):
                    bpfsys.map_update(self._maps["schedule"], INDEX.pack(pos), INDEX.pack(index))
            self._mix = mix
        slots = len(mix.schedule) if mix.rewritten else 0
        bpfsys.map_update(self._maps["state"], INDEX.pack(0), STATE.pack(slots, 0, 0, 0))
