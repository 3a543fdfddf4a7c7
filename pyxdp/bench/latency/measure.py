# SPDX-License-Identifier: Apache-2.0
"""The latency section's runs, on the bench's veth lab with zerolayer
attached to dut0: per round, per load, each path in turn (in the opposite
order on odd rounds), the paced sender (pyxdp/bench/latency/sender.py) in
the peer namespace on one CPU and the consumer process
(pyxdp/bench/latency/consumer.py) on the other.

A run: the consumer opens its socket and says it is ready; the sender
sends the load and exits; the consumer, told so, stops once it has every
frame or its socket has been idle for its IDLE_S; its latencies become the
run's percentiles (pyxdp/bench/latency/stats.py). Two counters of the dut
namespace are read around each run: BusyPollRxPackets (frames the kernel
received by busy polling, any socket) says whether busy polling happened
at all, and Udp RcvbufErrors what a UDP consumer lost to its full buffer.
"""

import contextlib
import multiprocessing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyxdp.bench.delivery.xsk_vs_udp import cpu_pair
from pyxdp.bench.latency import PATHS, consumer, sender
from pyxdp.bench.latency.stats import percentiles
from pyxdp.bench.worker import Worker
from pyxdp.errors import ZerolayerError
from pyxdp.kernel import mib

READY_TIMEOUT_S = 60.0  # the consumer process imports numpy and pyxdp first
RESULT_TIMEOUT_S = 30.0  # after the sender is done


class _Consumer(Worker):
    """The consumer process (consumer.worker_main), pinned to CPU."""

    def __init__(self, cpu: int | None):
        # spawn: no fork of a process holding BPF objects
        super().__init__(multiprocessing.get_context("spawn"), consumer.worker_main, cpu)

    def answer(self, path: str, timeout: float) -> dict:
        if not self.conn.poll(timeout):
            raise ZerolayerError(f"the {path} consumer did not answer in {timeout:.0f} s")
        got = self.conn.recv()
        if "error" in got:
            raise ZerolayerError(f"the {path} consumer failed: {got['error']}")
        return got


def _mib(lab) -> dict[str, int]:
    """The dut namespace's BusyPollRxPackets (/proc/net/netstat, TcpExt) and
    Udp RcvbufErrors (/proc/net/snmp): frames the kernel received by busy
    polling, and datagrams a full UDP socket buffer dropped."""
    with lab.in_dut():
        return {"busy_poll_rx_packets": mib.read("TcpExt", "netstat").get("BusyPollRxPackets", 0),
                "udp_rcvbuf_errors": mib.read("Udp").get("RcvbufErrors", 0)}


def _one(worker: _Consumer, binary: str, lab, path: str, load, cpus) -> dict:
    worker.conn.send({"path": path, "netns": lab.dut.netns, "ifname": lab.dut.ifname,
                      "address": lab.dut.ipv4, "expected": load.frames})
    worker.answer(path, READY_TIMEOUT_S)
    before = _mib(lab)
    try:
        sent = sender.send(binary, lab, streams=load.streams, rate=load.rate,
                           seconds=load.seconds, cpu=cpus[0] if cpus else None)
    finally:
        worker.conn.send("done")
    got = worker.answer(path, load.seconds + RESULT_TIMEOUT_S)
    latency = np.frombuffer(got.pop("latency_ns"), np.int64)
    if len(latency) and int(latency.min()) < 0:
        raise ZerolayerError(f"the {path} consumer got a frame stamped after it read it: "
                             "the sender and the consumer do not share CLOCK_MONOTONIC")
    sent_frames = sent.pop("sent")
    return {"sent": sent_frames, "received": got["received"],
            "lost": sent_frames - got["received"], **percentiles(latency),
            "cpu_per_frame_us": got["cpu_per_frame_us"],
            **{key: n - before[key] for key, n in _mib(lab).items()},
            "sender": sent,
            "consumer": {"reads": got["reads"], "cpu_s": got["cpu_s"], "socket": got["socket"]}}


@dataclass(frozen=True)
class Session:
    """What runs on a lab share: run(path, load) measures one run (as _one);
    compiler and cpus say what they ran on (the tune section runs here too)."""

    run: Callable[[str, Any], dict]
    compiler: str
    cpus: dict[str, int] | None


@contextlib.contextmanager
def session(lab) -> Iterator[Session]:
    """The consumer process and the built sender, for runs on LAB; both go on exit."""
    cpus = cpu_pair()
    worker = _Consumer(cpus[1] if cpus else None)
    try:
        with sender.built() as (binary, compiler):
            yield Session(lambda path, load: _one(worker, binary, lab, path, load, cpus),
                          compiler, {"sender": cpus[0], "consumer": cpus[1]} if cpus else None)
    finally:
        worker.stop()


def measure(lab, plan, progress: Callable[[str], None]) -> dict:
    """Every run of PLAN (pyxdp.bench.latency.section.Plan) on LAB: the
    runs, in order, and what they ran on."""
    runs = []
    with session(lab) as runs_on:
        for r in range(plan.rounds):
            for load in plan.loads:
                paths = PATHS if r % 2 == 0 else PATHS[::-1]
                for path in paths:
                    progress(f"round {r + 1}/{plan.rounds}: {load.name} "
                             f"({load.streams:,} stream{'s' if load.streams > 1 else ''} "
                             f"x {load.rate} frames/s, {load.seconds:g} s), {path}")
                    runs.append({"round": r, "load": load.name, "path": path,
                                 **runs_on.run(path, load)})
    return {"runs": runs, "compiler": runs_on.compiler, "cpus": runs_on.cpus}
