"""Delivery into Python: the same offered load into a UDP socket's
`recv_into` loop, then into pyxdp.xsk, in one run on one lab.

The load is N copies of one token datagram (one TOKEN frame) from the
BPF_PROG_RUN live-frames generator in the lab's peer namespace, sent flat
out from a thread while the consumer runs in the calling thread; with two or
more CPUs the two are pinned to different CPUs. veth runs dut0's NAPI where
the generator's frames are flushed, so the generator's CPU also does dut0's
receive work (XDP, then the UDP stack or the copy into UMEM) and the
consumer has its CPU to itself. The offered rate therefore differs between
the two runs (the kernel's UDP path costs the sender's CPU more); each run
reports it.

  udp: no AF_XDP socket registered, so valid datagrams fall back to the
       kernel; a UDP socket in the dut namespace, read with recv_into, one
       datagram per call (Python's socket API has no recvmmsg).
  xsk: an XskSocket on dut0's queue 0, read a batch at a time and released.
Both get 16 MiB of buffer (receive buffer; UMEM).

Each consumer counts the frames it got and the time from its first to its
last (frames/s = frames after the first read / that time). `offered_pps` is
FRAMES over the generator call's wall time, which includes a fixed cost in
the kernel (measured here: a 64-frame call takes about 24 ms), so it reads a
little low. `limited_by` says whether the consumer fell behind (its socket
dropped frames: the rate is the consumer's) or took everything it was
offered (the rate is the sender's, and the consumer could do more). Losses
are explained from the kernel's own counters: XDP_STATISTICS for the AF_XDP
socket, the namespace's Udp MIB (/proc/net/snmp) for the UDP socket,
zerolayer's XDP counters for what never reached either; `unexplained` is
the rest, 0 when the accounting is complete.

`run()` returns the dict the `delivery` section of `zerolayer bench` builds
on (pyxdp.bench.delivery runs it once per round).
"""

import os
import platform
import select
import socket
import threading
import time

from pyxdp.bench.load_thread import LoadThread
from pyxdp.lab import traffic
from pyxdp.lab.generator import LiveGenerator
from pyxdp.proto import counters
from pyxdp.proto import frames as frames_mod
from pyxdp.xdp import pins
from pyxdp.xdp.maps import ZerolayerMaps
from pyxdp.xdp.ownership import inspect
from pyxdp.xsk.socket import XskSocket

TARGET_RATIO, GOAL_RATIO = 2.0, 3.0
IDLE_S = 0.25  # the generator is done and nothing came for this long: the run is over
MAX_BATCH = 256
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


def run(frames: int, *, lab, generator: LiveGenerator, payload_size: int = 16) -> dict:
    """Measure both consumers under FRAMES offered datagrams, on LAB where
    zerolayer is attached to dut0, from GENERATOR in LAB's peer namespace."""
    payload = frames_mod.encode(frames_mod.FrameType.TOKEN, b"t" * payload_size)
    packet = bytes(traffic.udp_packet(lab, payload, sport=40000))
    cpus = _cpu_pair()
    udp = _measure(lab, generator, packet, frames, cpus, _UdpConsumer)
    xsk = _measure(lab, generator, packet, frames, cpus, _XskConsumer)
    return {
        "frames_offered": frames,
        "packet_bytes": len(packet),
        "udp_fps": udp["fps"],
        "xsk_fps": xsk["fps"],
        "ratio": round(xsk["fps"] / udp["fps"], 2) if udp["fps"] else None,
        "target_ratio": TARGET_RATIO,
        "goal_ratio": GOAL_RATIO,
        "xsk_mode": xsk.pop("mode"),
        "xdp_mode": inspect(lab.dut.ifname, lab.dut.netns).state.mode,
        "udp": udp,
        "xsk": xsk,
        "cpus": {"generator": cpus[0], "consumer": cpus[1]} if cpus else None,
        "kernel": platform.release(),
    }


def _cpu_pair() -> tuple[int, int] | None:
    allowed = sorted(os.sched_getaffinity(0))
    return (allowed[0], allowed[1]) if len(allowed) >= 2 else None


def _xdp_counters(lab) -> dict[str, int]:
    with ZerolayerMaps.open_pinned(pins.pin_dir(lab.dut.ifname, lab.dut.netns)) as maps:
        return maps.read_counters()


def _measure(lab, generator, packet: bytes, count: int, cpus, consumer_cls) -> dict:
    consumer = consumer_cls(lab)
    try:
        before = _xdp_counters(lab)
        home = os.sched_getaffinity(0)
        if cpus:
            os.sched_setaffinity(0, {cpus[1]})
        try:
            # Leaving the block raises the generator thread's failure, if any.
            with LoadThread("the generator thread", lambda _stop: generator.send(
                    packet, count, batch_size=64), cpu=cpus[0] if cpus else None) as load:
                received, window, counted = consumer.consume(count, load.done)
        finally:
            os.sched_setaffinity(0, home)
        xdp = counters.delta(_xdp_counters(lab), before)
        lost = consumer.losses(xdp, count)
        lost["total"] = count - received
        lost["unexplained"] = lost["total"] - sum(v for k, v in lost.items() if k != "total")
        return {
            "received": received,
            "fps": round(counted / window, 1) if window > 0 else 0.0,
            "window_s": round(window, 6),
            "offered_pps": round(count / load.elapsed_s, 1),
            "limited_by": "consumer" if consumer.dropped(lost) > CONSUMER_BOUND_LOSS * count
                          else "sender",
            "lost": lost,
            **consumer.details(),
        }
    finally:
        consumer.close()


class _UdpConsumer:
    def __init__(self, lab):
        self._lab = lab
        with lab.in_dut():
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._snmp_before = _udp_mib()
        # The kernel doubles what is asked for.
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BUFFER_BYTES // 2)
        self.sock.bind((lab.dut.ipv4, frames_mod.DEFAULT_PORT))

    def consume(self, count: int, done: threading.Event) -> tuple[int, float, int]:
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        recv_into, buf, flags = self.sock.recv_into, bytearray(2048), socket.MSG_DONTWAIT
        got, got_at_dry, t_first, t_last = 0, 0, 0.0, 0.0
        while got < count:
            try:
                recv_into(buf, 0, flags)
            except BlockingIOError:
                if got != got_at_dry:
                    t_last, got_at_dry = time.perf_counter(), got
                if not poller.poll(IDLE_S * 1000) and done.is_set():
                    break
                continue
            if not got:
                t_first = time.perf_counter()
            got += 1
        else:
            t_last = time.perf_counter()
        return got, t_last - t_first, max(got - 1, 0)

    def losses(self, xdp: dict, count: int) -> dict:
        with self._lab.in_dut():
            mib = _udp_mib()
        delta = {k: mib[k] - self._snmp_before.get(k, 0) for k in mib}
        return {
            "before_xdp": count - xdp["packets"],
            "socket_buffer_full": delta.get("RcvbufErrors", 0),
            "other_udp_errors": delta.get("InErrors", 0) - delta.get("RcvbufErrors", 0),
        }

    @staticmethod
    def dropped(lost: dict) -> int:
        return lost["socket_buffer_full"]

    def details(self) -> dict:
        return {"buffer_bytes": self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)}

    def close(self) -> None:
        self.sock.close()


def _udp_mib() -> dict[str, int]:
    """The Udp: lines of /proc/net/snmp, as seen from this thread's netns."""
    with open("/proc/thread-self/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    names, values = rows[0][1:], rows[1][1:]
    return {n: int(v) for n, v in zip(names, values)}


class _XskConsumer:
    def __init__(self, lab):
        self.xsk = XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, **XSK_OPTIONS)

    def consume(self, count: int, done: threading.Event) -> tuple[int, float, int]:
        recv, wait = self.xsk.recv, self.xsk.wait
        got, got_at_dry, first, t_first, t_last = 0, 0, 0, 0.0, 0.0
        while got < count:
            batch = recv(MAX_BATCH)
            if batch:
                if not got:
                    t_first, first = time.perf_counter(), len(batch)
                got += len(batch)
                batch.release()
                continue
            if got != got_at_dry:
                t_last, got_at_dry = time.perf_counter(), got
            if not wait(IDLE_S) and done.is_set():
                break
        else:
            t_last = time.perf_counter()
        return got, t_last - t_first, got - first

    def losses(self, xdp: dict, count: int) -> dict:
        st = self.xsk.statistics()
        return {
            "before_xdp": count - xdp["packets"],
            "not_redirected": xdp["packets"] - xdp["redirected"],
            "rx_ring_full": st.rx_ring_full,
            "fill_ring_empty": st.rx_fill_ring_empty_descs,
            # in copy mode rx_dropped includes the fill-ring-empty drops
            "other_rx_dropped": st.rx_dropped - st.rx_fill_ring_empty_descs,
        }

    @staticmethod
    def dropped(lost: dict) -> int:
        return lost["rx_ring_full"] + lost["fill_ring_empty"]

    def details(self) -> dict:
        return {"buffer_bytes": XSK_OPTIONS["frames"] * XSK_OPTIONS["chunk_size"],
                "mode": self.xsk.mode, "statistics": self.xsk.statistics().to_json()}

    def close(self) -> None:
        self.xsk.close()

