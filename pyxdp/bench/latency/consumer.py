# SPDX-License-Identifier: Apache-2.0
"""The consumers of the latency section, in a process of their own (pinned
to the consumer's CPU), one socket a run, each as a user would write it:

  af_xdp            pyxdp's XskSocket on the dut's queue 0, its batch API:
                    recv(timeout) (a poll() while the ring is empty), then
                    each frame of the batch;
  af_xdp_busy_poll  the same with busy_poll=BusyPoll();
  af_xdp_asyncio    the same socket in an asyncio program: `async for
                    batch in xsk.batches()` (pyxdp/xsk/aio.py), which
                    waits in the event loop's selector while the ring is
                    empty;
  udp               a blocking UDP socket: recv_into, one datagram a call;
  udp_busy_poll     the same with SO_BUSY_POLL, SO_PREFER_BUSY_POLL and
                    SO_BUSY_POLL_BUDGET (pyxdp.xsk.busy_poll.apply, the
                    values of BusyPoll()): a blocking read polls the device
                    queue before it sleeps.

Both kinds get the same buffer memory, 16 MiB, as in the delivery section
(pyxdp.bench.delivery.xsk_vs_udp: BUFFER_BYTES, XSK_OPTIONS).

The work per frame is the same on every path: read the sender's stamp from
the frame and keep the latency, the clock read as the read returns (once a
batch for AF_XDP: the moment the code holds its frames) minus the stamp.

CPU is the process's own (user + system, getrusage), from the first frame
received to the last, over the frames after the first read: what the
consumer spent per frame, its waits included (busy polling spends there).
"""

import asyncio
import contextlib
import os
import resource
import socket
import struct
import time
from multiprocessing.connection import Connection

from pyxdp.bench.delivery.xsk_vs_udp import BUFFER_BYTES, SO_RCVBUFFORCE, XSK_OPTIONS
from pyxdp.kernel import netns
from pyxdp.proto.frames import DEFAULT_PORT

# A datagram of the paced sender: the frame header (length, type), then the
# payload it opens with, the stamp (paced_sender.c; stream and number follow).
FRAME = struct.Struct("!IBQ")
STAMP = struct.Struct("!Q")
IDLE_S = 0.2  # a read waits this long before it looks whether the sender is done
MAX_BATCH = 256


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _Run:
    """What one consumer's loop keeps: latencies (ns), reads, and CPU."""

    def __init__(self):
        self.latency_ns: list[int] = []
        self.reads = 0  # reads that returned frames
        self.first_read = 0  # frames of the first
        self.cpu_first = self.cpu_last = 0.0

    def started(self, frames: int) -> None:
        self.first_read, self.cpu_first = frames, _cpu_s()

    def result(self) -> dict:
        counted = len(self.latency_ns) - self.first_read
        cpu = self.cpu_last - self.cpu_first
        return {"received": len(self.latency_ns), "reads": self.reads,
                "cpu_s": round(cpu, 6),
                "cpu_per_frame_us": round(cpu * 1e6 / counted, 3) if counted > 0 else None}


class UdpConsumer:
    """A blocking UDP socket at ADDRESS:DEFAULT_PORT in NETNS; BUSY: a
    pyxdp.xsk.busy_poll.BusyPoll to apply, or None."""

    def __init__(self, netns_name: str | None, address: str, busy=None):
        with netns.entered(netns_name):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BUFFER_BYTES // 2)
            # Blocking still (Python's timeout would poll() first): the read
            # itself gives up after IDLE_S, so the loop can look for the end.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                 struct.pack("ll", 0, int(IDLE_S * 1e6)))
            self.state = None
            if busy is not None:
                from pyxdp.xsk import busy_poll

                self.state = busy_poll.apply(self.sock, busy)
            self.sock.bind((address, DEFAULT_PORT))
        except BaseException:
            self.sock.close()
            raise

    def consume(self, expected: int, done) -> _Run:
        run = _Run()
        recv_into, unpack_from, now = self.sock.recv_into, FRAME.unpack_from, time.monotonic_ns
        keep = run.latency_ns.append
        buf = bytearray(2048)
        got = 0
        while got < expected:
            try:
                recv_into(buf)
            except BlockingIOError:  # IDLE_S without a datagram
                if done():
                    break
                continue
            t = now()
            keep(t - unpack_from(buf)[2])
            got += 1
            if got == 1:
                run.started(1)
        run.cpu_last, run.reads = _cpu_s(), got
        return run

    def describe(self) -> dict:
        from pyxdp.xsk import busy_poll

        refusal = self.state.refusal() if self.state is not None else None
        return {"napi_id": busy_poll.napi_id(self.sock),
                "busy_poll": None if self.state is None else self.state.to_json(),
                "notes": [refusal] if refusal else []}

    def close(self) -> None:
        self.sock.close()


class XskConsumer:
    """pyxdp's XskSocket on IFNAME's queue 0 in NETNS; BUSY: its busy_poll."""

    def __init__(self, netns_name: str | None, ifname: str, busy=None):
        from pyxdp.xsk.socket import XskSocket

        options = {} if busy is None else {"busy_poll": busy}
        self.xsk = XskSocket(ifname, 0, netns=netns_name, frames=XSK_OPTIONS["frames"],
                             chunk_size=XSK_OPTIONS["chunk_size"], rx_size=XSK_OPTIONS["rx_size"],
                             **options)

    def consume(self, expected: int, done) -> _Run:
        run = _Run()
        recv, take = self.xsk.recv, self._take
        got = 0
        while got < expected:
            batch = recv(MAX_BATCH, timeout=IDLE_S)
            if not batch:
                if done():
                    break
                continue
            with batch:
                got += take(run, batch)
        run.cpu_last = _cpu_s()
        return run

    @staticmethod
    def _take(run: _Run, batch) -> int:
        """BATCH's latencies into RUN, the clock read once as the code holds
        its frames; how many frames it had."""
        t, keep, unpack_from = time.monotonic_ns(), run.latency_ns.append, STAMP.unpack_from
        for _type, payload in batch.frames():
            keep(t - unpack_from(payload)[0])
        if not run.reads:
            run.started(len(batch))
        run.reads += 1
        return len(batch)

    def describe(self) -> dict:
        return {**self.xsk.describe(), "notes": self.xsk.notes(),
                "statistics": self.xsk.statistics().to_json()}

    def close(self) -> None:
        self.xsk.close()


class XskAsyncConsumer(XskConsumer):
    """The same socket read by an asyncio program: one task iterates
    xsk.batches(); the run's own coroutine ends it (task.cancel(), which
    leaves the selector clean) once the sender is done and IDLE_S passed
    without a frame, as the batch API's loop ends."""

    def consume(self, expected: int, done) -> _Run:
        return asyncio.run(self._consume(expected, done))

    async def _consume(self, expected: int, done) -> _Run:
        run = _Run()
        got = 0

        async def read() -> None:
            nonlocal got
            async for batch in self.xsk.batches(MAX_BATCH):
                got += self._take(run, batch)
                if got >= expected:
                    return

        reader = asyncio.create_task(read())
        seen = -1
        while not reader.done():
            await asyncio.wait({reader}, timeout=IDLE_S)
            if not reader.done() and got == seen and done():
                reader.cancel()
            seen = got
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        run.cpu_last = _cpu_s()
        return run


def open_consumer(path: str, netns_name: str, ifname: str, address: str):
    """The consumer of PATH (one of pyxdp.bench.latency.PATHS) on the dut's IFNAME and ADDRESS."""
    busy = None
    if path.endswith("_busy_poll"):
        from pyxdp.xsk.busy_poll import BusyPoll

        busy = BusyPoll()
    if path == "af_xdp_asyncio":
        return XskAsyncConsumer(netns_name, ifname)
    if path.startswith("af_xdp"):
        return XskConsumer(netns_name, ifname, busy)
    return UdpConsumer(netns_name, address, busy)


def worker_main(conn: Connection, cpu: int | None) -> None:
    """The consumer process: pinned to CPU, it serves one job a run until
    it gets None. A job is open_consumer's arguments and the frames
    expected; the worker answers {"ready": True}, takes frames
    until it has them all or the parent's "done" came and the socket has
    been idle, then answers with what it measured ("latency_ns": int64
    bytes). A failure is answered {"error": ...} at either step."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    while (job := conn.recv()) is not None:
        if job == "done":  # of a run that failed before it was read
            continue
        told = False

        def done() -> bool:
            nonlocal told
            told = told or (conn.poll() and conn.recv() == "done")
            return told

        try:
            consumer = open_consumer(job["path"], job["netns"], job["ifname"], job["address"])
        except Exception as exc:  # reported, and the run fails
            conn.send({"error": f"{type(exc).__name__}: {exc}"})
            continue
        try:
            conn.send({"ready": True})
            run = consumer.consume(job["expected"], done)
            while not done():  # the parent's word that the sender is done
                time.sleep(0.01)
            import numpy as np

            conn.send({**run.result(), "socket": consumer.describe(),
                       "latency_ns": np.asarray(run.latency_ns, np.int64).tobytes()})
        except Exception as exc:
            conn.send({"error": f"{type(exc).__name__}: {exc}"})
        finally:
            consumer.close()
