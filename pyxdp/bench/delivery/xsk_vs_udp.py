# SPDX-License-Identifier: Apache-2.0
"""Delivery into Python: the same offered load into a UDP socket, into
pyxdp.xsk and into a C consumer on libxdp, at each tier of work per frame
(pyxdp.bench.delivery.tiers), in one run on one lab.

The load is N datagrams, each one 16-byte TOKEN frame, from FLOWS source
ports in turn, sent by the BPF_PROG_RUN live-frames generator in the lab's
peer namespace flat out from a thread while the consumer runs in the
calling thread (the C consumer in a process of its own); with two or more
CPUs the two are pinned to different CPUs. veth runs dut0's NAPI where the
generator's frames are flushed, so the generator's CPU also does dut0's
receive work (XDP, then the UDP stack or the copy into UMEM) and the
consumer has its CPU to itself. The offered rate therefore differs between
runs (the kernel's UDP path costs the sender's CPU more); each run reports
it.

  udp: no AF_XDP socket registered, so valid datagrams fall back to the
       kernel; a UDP socket in the dut namespace, one datagram per call
       (Python's socket API has no recvmmsg).
  xsk: an XskSocket on dut0's queue 0, read a batch at a time and released.
  c:   pyxdp/bench/delivery/xsk_consumer.c on the same queue, touch tier only.
All get 16 MiB of buffer (receive buffer; UMEM), and take up to MAX_BATCH
datagrams between looks at the clock.

Each consumer counts the datagrams it got and the time from its first batch
to its last (frames/s = datagrams after the first batch / that time; one
frame per datagram). `offered_pps` is the datagrams over the generator
call's wall time, which includes a fixed cost in the kernel (measured here:
a 64-frame call takes about 24 ms), so it reads a little low. `limited_by`
says whether the consumer fell behind (its socket dropped frames: the rate
is the consumer's) or took everything it was offered (the rate is the
sender's, and the consumer could do more). Losses are explained from the
kernel's own counters: XDP_STATISTICS for the AF_XDP sockets, the
namespace's Udp MIB (/proc/net/snmp) for the UDP socket, zerolayer's XDP
counters for what never reached either; `unexplained` is the rest, 0 when
the accounting is complete. A tier that walked fewer frames than its
consumer received, or built the wrong streams, stops the bench: its figure
would not be of the work it names.

`run()` measures one round; pyxdp.bench.delivery.section runs the rounds.
"""

import os
import platform
import select
import socket
import threading
import time
from typing import Any, Protocol

from pyxdp.bench.delivery import tiers
from pyxdp.bench.delivery.c_consumer import CConsumer
from pyxdp.bench.delivery.tiers import TIERS
from pyxdp.bench.load_thread import LoadThread
from pyxdp.errors import ZerolayerError
from pyxdp.kernel import mib
from pyxdp.lab import traffic
from pyxdp.lab.generator import LiveGenerator, Mix
from pyxdp.proto import counters
from pyxdp.proto import frames as frames_mod
from pyxdp.xdp import pins
from pyxdp.xdp.maps import ZerolayerMaps
from pyxdp.xdp.ownership import inspect
from pyxdp.xsk.afxdp import XskStatistics
from pyxdp.xsk.socket import XskSocket

IDLE_S = 0.25  # the generator is done and nothing came for this long: the run is over
MAX_BATCH = 256
PAYLOAD_BYTES = 16
FLOWS = 8  # source ports 40000.. in turn: the act tier's streams
FIRST_SPORT = 40000
# Both consumers get the same buffer memory, 16 MiB: the AF_XDP socket as
# 8192 chunks of 2 KiB (RX ring 4096), the UDP socket as its receive buffer
# (a small datagram passed up from veth's XDP path costs about 4 KiB of it:
# 4240 bytes of rmem_alloc each, measured with SO_MEMINFO on kernel 6.18).
BUFFER_BYTES = 16 << 20
XSK_OPTIONS = {"frames": 8192, "chunk_size": 2048, "rx_size": 4096}
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # root may exceed rmem_max
# A consumer whose socket dropped more than this share could not keep up:
# its rate is its own limit. Otherwise it got what was sent, and the sender
# (the generator plus the kernel's receive work on its CPU) set the rate.
CONSUMER_BOUND_LOSS = 0.001
SIDES = ("udp", "xsk", "c")
LOAD = (f"IPv4 UDP datagrams of one {PAYLOAD_BYTES}-byte TOKEN frame, from {FLOWS} source "
        "ports in turn")


def load(route, flows: int = FLOWS) -> Mix:
    """The offered load: FLOWS templates, one per source port, interleaved."""
    payload = frames_mod.encode(frames_mod.FrameType.TOKEN, b"t" * PAYLOAD_BYTES)
    return Mix.weighted([(bytes(traffic.udp_packet(route, payload, sport=FIRST_SPORT + i)), 1)
                         for i in range(flows)])


def run(frames: int, *, lab, generator: LiveGenerator, c_binary: str | None = None,
        reverse: bool = False) -> dict:
    """One round: every tier of every consumer under FRAMES offered
    datagrams, on LAB where zerolayer is attached to dut0, from GENERATOR in
    LAB's peer namespace. C_BINARY: the built C consumer, or None to leave
    it out. REVERSE: the consumers of each tier in the opposite order."""
    mix = load(lab)
    cpus = cpu_pair()
    runs: dict[str, dict] = {}
    for tier in TIERS:
        sides = [s for s in SIDES if s != "c" or (tier == "touch" and c_binary)]
        for side in reversed(sides) if reverse else sides:
            consumer = _consumer(side, tier, lab, frames, cpus, c_binary)
            runs[f"{side}_{tier}"] = measure(lab, generator, mix, frames, cpus, consumer)
    return {
        "frames_offered": frames,
        "packet_bytes": len(mix.templates[0]),
        "flows": FLOWS,
        "order": list(runs),
        "xsk_mode": runs["xsk_count"]["mode"],
        "xdp_mode": inspect(lab.dut.ifname, lab.dut.netns).state.mode,
        "runs": runs,
        "cpus": {"generator": cpus[0], "consumer": cpus[1]} if cpus else None,
        "kernel": platform.release(),
    }


def _consumer(side: str, tier: str, lab, count: int, cpus, c_binary):
    if side == "udp":
        return _UdpConsumer(lab, tier)
    if side == "xsk":
        return XskConsumer(lab, tier)
    assert c_binary is not None
    return _CRun(CConsumer(lab, c_binary, count, cpu=cpus[1] if cpus else None,
                           xsk_options=XSK_OPTIONS, idle_s=IDLE_S))


def cpu_pair() -> tuple[int, int] | None:
    allowed = sorted(os.sched_getaffinity(0))
    return (allowed[0], allowed[1]) if len(allowed) >= 2 else None


def _xdp_counters(lab) -> dict[str, int]:
    with ZerolayerMaps.open_pinned(pins.pin_dir(lab.dut.ifname, lab.dut.netns)) as maps:
        return maps.read_counters()


class Load(Protocol):
    """What sends the offered datagrams: the live-frames generator, or
    anything else that sends COUNT datagrams (of MIX, or its own) when run."""

    def run(self, mix: Mix, count: int) -> Any: ...


def measure(lab, generator: Load, mix: Mix, count: int, cpus, consumer) -> dict:
    """COUNT datagrams of MIX from GENERATOR into CONSUMER, which is closed after."""
    try:
        before = _xdp_counters(lab)
        home = os.sched_getaffinity(0)
        if cpus:
            os.sched_setaffinity(0, {cpus[1]})
        try:
            # Leaving the block raises the generator thread's failure, if any.
            with LoadThread("the generator thread", lambda _stop: generator.run(mix, count),
                            cpu=cpus[0] if cpus else None) as load:
                received, window, counted = consumer.consume(count, load.done)
        finally:
            os.sched_setaffinity(0, home)
        xdp = counters.delta(_xdp_counters(lab), before)
        lost = consumer.losses(xdp, count)
        lost["total"] = count - received
        lost["unexplained"] = lost["total"] - sum(v for k, v in lost.items() if k != "total")
        result = {
            "received": received,
            "fps": round(counted / window, 1) if window > 0 else 0.0,
            "window_s": round(window, 6),
            "offered_pps": round(count / load.elapsed_s, 1),
            "limited_by": "consumer" if consumer.dropped(lost) > CONSUMER_BOUND_LOSS * count
                          else "sender",
            "lost": lost,
            **consumer.details(),
        }
        consumer.check(result)
        return result
    finally:
        consumer.close()


def _consume(take, wait, count: int, done: threading.Event) -> tuple[int, float, int]:
    """Run a Python consumer: TAKE(limit) handles up to LIMIT datagrams and
    says how many; WAIT(timeout) blocks until more may be ready. Returns the
    datagrams received, the window from the first batch to the last, and
    the datagrams after the first batch."""
    got, got_at_dry, first, t_first, t_last = 0, 0, 0, 0.0, 0.0
    while got < count:
        n = take(min(MAX_BATCH, count - got))
        if n:
            if not got:
                t_first, first = time.perf_counter(), n
            got += n
            continue
        if got != got_at_dry:
            t_last, got_at_dry = time.perf_counter(), got
        if not wait(IDLE_S) and done.is_set():
            break
    else:
        t_last = time.perf_counter()
    return got, t_last - t_first, got - first


def _check_walk(result: dict, tier: str, flows: int = FLOWS) -> None:
    """A touch or act tier walked one frame per datagram received, and the
    act tier appended each to the stream of its flow."""
    if tier == "count":
        return
    walked, received = result["frames_walked"], result["received"]
    if walked != received:
        raise ZerolayerError(f"the {tier} tier walked {walked:,} frames of {received:,} "
                             "one-frame datagrams")
    if tier == "act" and (result["tokens_appended"] != walked
                          or result["flows"] != min(flows, received)):
        raise ZerolayerError(
            f"the act tier appended {result['tokens_appended']:,} tokens to "
            f"{result['flows']} streams, for {walked:,} TOKEN frames from {flows} flows")


class _UdpConsumer:
    def __init__(self, lab, tier: str):
        self._lab, self.tier = lab, tier
        self._drain = tiers.UDP_DRAINS[tier]
        self.tally = tiers.Tally()
        with lab.in_dut():
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._snmp_before = mib.read("Udp")
        # The kernel doubles what is asked for.
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BUFFER_BYTES // 2)
        self.sock.bind((lab.dut.ipv4, frames_mod.DEFAULT_PORT))

    def consume(self, count: int, done: threading.Event) -> tuple[int, float, int]:
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        drain, sock, buf, tally = self._drain, self.sock, bytearray(2048), self.tally

        def take(limit: int) -> int:
            return drain(sock, buf, limit, tally)

        return _consume(take, lambda timeout: bool(poller.poll(timeout * 1000)), count, done)

    def losses(self, xdp: dict, count: int) -> dict:
        with self._lab.in_dut():
            udp = mib.read("Udp")
        delta = {k: udp[k] - self._snmp_before.get(k, 0) for k in udp}
        return {
            "before_xdp": count - xdp["packets"],
            "socket_buffer_full": delta.get("RcvbufErrors", 0),
            "other_udp_errors": delta.get("InErrors", 0) - delta.get("RcvbufErrors", 0),
        }

    @staticmethod
    def dropped(lost: dict) -> int:
        return lost["socket_buffer_full"]

    def details(self) -> dict:
        out = {"buffer_bytes": self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)}
        return out if self.tier == "count" else {**out, **self.tally.to_json()}

    def check(self, result: dict) -> None:
        _check_walk(result, self.tier)

    def close(self) -> None:
        self.sock.close()


def _xsk_losses(st: XskStatistics, xdp: dict, count: int) -> dict:
    return {
        "before_xdp": count - xdp["packets"],
        "not_redirected": xdp["packets"] - xdp["redirected"],
        "rx_ring_full": st.rx_ring_full,
        "fill_ring_empty": st.rx_fill_ring_empty_descs,
        # in copy mode rx_dropped includes the fill-ring-empty drops
        "other_rx_dropped": st.rx_dropped - st.rx_fill_ring_empty_descs,
    }


def _xsk_dropped(lost: dict) -> int:
    return lost["rx_ring_full"] + lost["fill_ring_empty"]


def batch_sizes(sizes: list[int]) -> dict:
    """How many datagrams the consumer's batches held: their count, mean and
    quantiles."""
    if not sizes:
        return {"batches": 0}
    ordered = sorted(sizes)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"batches": len(sizes), "mean": round(sum(sizes) / len(sizes), 1), "p10": at(0.1),
            "p50": at(0.5), "p90": at(0.9), "max": ordered[-1]}


class XskConsumer:
    """pyxdp's AF_XDP socket on the dut's queue 0, doing TIER's work, bound
    in BIND mode (pyxdp.xsk.socket.XskSocket's)."""

    def __init__(self, lab, tier: str, bind: str = "auto"):
        self.tier = tier
        self._work = tiers.XSK_WORK[tier]
        self.tally = tiers.Tally()
        self.batch_sizes: list[int] = []  # datagrams per non-empty batch: a per-batch cost's weight
        o = XSK_OPTIONS
        self.xsk = XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, frames=o["frames"],
                             chunk_size=o["chunk_size"], rx_size=o["rx_size"], bind=bind)

    def consume(self, count: int, done: threading.Event) -> tuple[int, float, int]:
        recv, work, tally, sizes = self.xsk.recv, self._work, self.tally, self.batch_sizes

        def take(limit: int) -> int:
            batch = recv(limit)
            n = len(batch)
            if n:
                work(batch, tally)
                batch.release()
                sizes.append(n)
            return n

        return _consume(take, self.xsk.wait, count, done)

    def losses(self, xdp: dict, count: int) -> dict:
        return _xsk_losses(self.xsk.statistics(), xdp, count)

    dropped = staticmethod(_xsk_dropped)

    def details(self) -> dict:
        out = {"buffer_bytes": XSK_OPTIONS["frames"] * XSK_OPTIONS["chunk_size"],
               "mode": self.xsk.mode, "statistics": self.xsk.statistics().to_json(),
               "batch_sizes": batch_sizes(self.batch_sizes)}
        return out if self.tier == "count" else {**out, **self.tally.to_json()}

    def check(self, result: dict) -> None:
        _check_walk(result, self.tier)

    def close(self) -> None:
        self.xsk.close()


class _CRun:
    """The C consumer (pyxdp.bench.delivery.c_consumer) as a consumer of measure()."""

    def __init__(self, consumer: CConsumer):
        self.c = consumer

    def consume(self, count: int, done: threading.Event) -> tuple[int, float, int]:
        return self.c.consume(count, done)

    def losses(self, xdp: dict, count: int) -> dict:
        return _xsk_losses(XskStatistics(**self.c.statistics), xdp, count)

    dropped = staticmethod(_xsk_dropped)

    def details(self) -> dict:
        return {"buffer_bytes": XSK_OPTIONS["frames"] * XSK_OPTIONS["chunk_size"],
                **self.c.details()}

    def check(self, result: dict) -> None:
        types = result["frame_types"]
        if (result["frames_walked"] != result["received"] or result["malformed"]
                or types["token"] != result["received"]):
            raise ZerolayerError(
                f"the C consumer walked {result['frames_walked']:,} frames "
                f"({types['token']:,} TOKEN, {result['malformed']} malformed datagrams) of "
                f"{result['received']:,} one-frame token datagrams")

    def close(self) -> None:
        self.c.close()
