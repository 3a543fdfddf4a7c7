# SPDX-License-Identifier: Apache-2.0
"""Sending, the measurement of the `tx` section of `zerolayer bench`
(pyxdp.bench.tx.section): datagrams/s that reach
the lab's dut0, counted by zerolayer's XDP counters there
(`token_datagrams`), from three senders in the peer namespace on peer0,
each sending the same datagrams (the same payload bytes, the same count):

  tokensender  pyxdp.xsk.sender.TokenSender.send_datagrams, MMSG_BATCH
               payloads a call (AF_XDP, copy mode on veth);
  sendto       a Python loop of socket.sendto(payload, address);
  sendmmsg     sendmmsg(2) through ctypes, MMSG_BATCH message headers built
               once over the payloads (pyxdp.bench.tx.sendmmsg).

The datagrams: POOL different payloads, each one TOKEN frame of
PAYLOAD_BYTES bytes (IPv4, UDP to port 9977), cycled to the count.
Rounds alternate the senders' order. A run's rate is the datagrams
counted at dut0 over the sender's wall time, from its first send until it
is done (for TokenSender: until the kernel completed the last datagram);
the count is read once it stops moving.

veth runs dut0's receive path on the sending CPU, inside the send, so what
dut0 does with a datagram after XDP costs every sender alike, and shrinks
the differences between them. Two sinks are measured, in this order:
  xdp  zerolayer redirects each datagram to an AF_XDP socket on dut0 that
       has no free chunk, and the kernel drops it there, before copying:
       the least receive work there is after a counted arrival (it shows
       in the socket's rx_dropped);
  udp  no AF_XDP socket: zerolayer passes each datagram to the kernel's
       UDP stack, which queues it to a UDP socket on dut0 that nobody
       reads (RcvbufErrors once its buffer is full).
The targets are set on the xdp sink: it measures the senders most nearly
alone. All senders run pinned to one CPU; its busy and softirq shares
during each run are reported, with the sending thread's own CPU time.
"""

import functools
import os
import socket
import time
from collections.abc import Callable

import psutil

from pyxdp.bench.tx.sendmmsg import MmsgSender
from pyxdp.kernel import link_stats
from pyxdp.proto import counters
from pyxdp.proto.frames import DEFAULT_PORT, FrameType, encode
from pyxdp.xdp import stats
from pyxdp.xsk.sender import TokenSender
from pyxdp.xsk.socket import XskSocket

POOL = 256
PAYLOAD_BYTES = 16
MMSG_BATCH = POOL  # datagrams per call, for sendmmsg and TokenSender alike
SENDERS = ("tokensender", "sendto", "sendmmsg")
SINKS = ("xdp", "udp")
SINK_WORK = {
    "xdp": "redirected by zerolayer to an AF_XDP socket in copy mode with no free chunk, dropped "
           "there",
    "udp": "passed to the kernel's UDP stack, queued to a socket nobody reads",
}
SETTLE_S = 0.05  # the counter has not moved for this long: the run's datagrams are in
SINK_FRAMES = 64  # the sink socket's chunks: filled once, never given back
LOAD = (f"IPv4 UDP datagrams of one {PAYLOAD_BYTES}-byte TOKEN frame, {POOL} different "
        "payloads cycled")


def payloads(pool: int = POOL) -> list[bytes]:
    """POOL token datagrams, each its number in text, padded to PAYLOAD_BYTES."""
    return [encode(FrameType.TOKEN, f"token {i:05d}".ljust(PAYLOAD_BYTES, ".")[:PAYLOAD_BYTES])
            for i in range(pool)]


def _arrived(lab) -> int:
    return counters.flatten(stats.read(lab.dut.ifname, lab.dut.netns)["counters"])[
        "token_datagrams"]


def _settled(lab, last: int) -> int:
    """The arrival count once it has stopped moving."""
    while True:
        time.sleep(SETTLE_S)
        now = _arrived(lab)
        if now == last:
            return now
        last = now


class Sink:
    """What dut0 does with a datagram after zerolayer counted it."""

    def __init__(self, lab, name: str):
        self.name = name
        self._xsk: XskSocket | None = None
        self._udp: socket.socket | None = None
        if name == "xdp":
            # Copy mode always: a zero-copy driver with no free chunk stops
            # taking frames off the wire instead of dropping them at the
            # socket (virtio_net under qemu holds the sender back until its
            # TX times out), and the sink would measure that, not a sender.
            self._xsk = XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, frames=SINK_FRAMES,
                                  rx_size=SINK_FRAMES, bind="copy")
        else:
            with lab.in_dut():
                self._udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._udp.bind((lab.dut.ipv4, DEFAULT_PORT))

    def dropped(self) -> int | None:
        """Datagrams the AF_XDP sink dropped (None for the UDP sink)."""
        return self._xsk.statistics().rx_dropped if self._xsk else None

    def close(self) -> None:
        for thing in (self._xsk, self._udp):
            if thing is not None:
                thing.close()


# --- the senders ----------------------------------------------------------------------

def _tokensender(lab, datagrams: list[bytes], batch: int, budget: int | None,
                 bind: str = "auto"):
    sender = TokenSender(lab.peer.ifname, f"{lab.dut.ipv4}:{DEFAULT_PORT}",
                         netns=lab.peer.netns, batch=batch, budget=budget, bind=bind)

    def send() -> int:
        for i in range(0, len(datagrams), batch):
            sender.send_datagrams(datagrams[i:i + batch])
        sender.flush(timeout=5.0)
        return sender.datagrams

    def details() -> dict:
        tx = sender.tx
        assert tx is not None
        return {"mode": tx.mode, "batch": sender.batch, "budget": tx.budget,
                "tally": tx.tally.to_json(), "tx_invalid_descs": tx.statistics().tx_invalid_descs}
    return send, details, sender.close


def _sendto(lab, datagrams: list[bytes], batch: int, budget: int | None):
    with lab.in_peer():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    address = (lab.dut.ipv4, DEFAULT_PORT)

    def send() -> int:
        sendto = sock.sendto
        for payload in datagrams:
            sendto(payload, address)
        return len(datagrams)
    return send, dict, sock.close


def _sendmmsg(lab, datagrams: list[bytes], batch: int, budget: int | None):
    with lab.in_peer():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((lab.dut.ipv4, DEFAULT_PORT))
    mmsg = MmsgSender(sock, datagrams[:MMSG_BATCH])

    def send() -> int:
        return mmsg.send(len(datagrams))

    def details() -> dict:
        return {"batch": mmsg.batch, "calls": mmsg.calls}
    return send, details, sock.close


_SENDERS: dict[str, Callable] = {"tokensender": _tokensender, "sendto": _sendto,
                                 "sendmmsg": _sendmmsg}


def run_one(lab, name: str, datagrams: list[bytes], cpu: int | None, *, batch: int = MMSG_BATCH,
            budget: int | None = None, bind: str = "auto") -> dict:
    """One run of sender NAME: DATAGRAMS from the peer, pinned to CPU;
    BIND: the AF_XDP mode TokenSender asks for (the other senders have none)."""
    make = functools.partial(_tokensender, bind=bind) if name == "tokensender" else _SENDERS[name]
    send, details, close = make(lab, datagrams, batch, budget)
    home = os.sched_getaffinity(0)
    try:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        before, link_before = _arrived(lab), link_stats.read(lab.peer.ifname, lab.peer.netns)
        cpu_before = psutil.cpu_times(percpu=True)[cpu] if cpu is not None else None
        thread_before, start = time.thread_time(), time.perf_counter()
        submitted = send()
        seconds = time.perf_counter() - start
        thread_s = time.thread_time() - thread_before
        cpu_after = psutil.cpu_times(percpu=True)[cpu] if cpu is not None else None
        arrived = _settled(lab, _arrived(lab)) - before
        link = link_stats.delta(link_stats.read(lab.peer.ifname, lab.peer.netns), link_before)
        extra = details()
    finally:
        os.sched_setaffinity(0, home)
        close()
    return {"submitted": submitted, "arrived": arrived, "lost": submitted - arrived,
            "seconds": round(seconds, 6), "dps": round(arrived / seconds, 1),
            "thread_cpu_s": round(thread_s, 4), "cpu": _cpu_share(cpu, cpu_before, cpu_after),
            "link": link, **extra}


def _cpu_share(cpu, before, after) -> dict | None:
    """How busy CPU was during a run, and with what (shares of its time)."""
    if before is None or after is None:
        return None
    spent = {field: getattr(after, field) - getattr(before, field) for field in after._fields}
    total = sum(spent.values()) or 1.0
    idle = spent.get("idle", 0.0) + spent.get("iowait", 0.0)
    return {"cpu": cpu, "busy": round(1 - idle / total, 3),
            "user": round(spent.get("user", 0.0) / total, 3),
            "system": round(spent.get("system", 0.0) / total, 3),
            "softirq": round(spent.get("softirq", 0.0) / total, 3),
            "steal": round(spent.get("steal", 0.0) / total, 3)}


def measure(lab, *, rounds: int, datagrams: int, progress=lambda line: None) -> dict:
    """Per sink: per-round datagrams/s and losses by sender, and the
    ratios of TokenSender to sendto and to sendmmsg in each round; the
    last round whole; the AF_XDP mode."""
    pool = payloads()
    load = [pool[i % len(pool)] for i in range(datagrams)]
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[0] if allowed else None
    out: dict = {"dps": {}, "lost": {}, "ratio": {}, "last_round": {}, "sinks": {}}
    for sink_name in SINKS:
        progress(f"  sink {sink_name}: {SINK_WORK[sink_name]}")
        sink = Sink(lab, sink_name)
        dps: dict[str, list[float]] = {s: [] for s in SENDERS}
        lost: dict[str, list[float]] = {s: [] for s in SENDERS}
        ratio: dict[str, list[float]] = {"vs_sendto": [], "vs_sendmmsg": []}
        runs: dict = {}
        dropped0, arrived0 = sink.dropped(), _arrived(lab)
        try:
            for r in range(rounds):
                order = SENDERS if r % 2 == 0 else SENDERS[::-1]
                runs = {name: run_one(lab, name, load, cpu) for name in order}
                for name, run in runs.items():
                    dps[name].append(run["dps"])
                    lost[name].append(run["lost"])
                for other in ("sendto", "sendmmsg"):
                    ratio[f"vs_{other}"].append(runs["tokensender"]["dps"] / runs[other]["dps"]
                                                if runs[other]["dps"] else 0.0)
            dropped1, arrived1 = sink.dropped(), _arrived(lab)
        finally:
            sink.close()
        out["dps"][sink_name], out["lost"][sink_name] = dps, lost
        out["ratio"][sink_name] = ratio
        out["last_round"][sink_name] = {"order": list(runs), "runs": runs}
        out["sinks"][sink_name] = {
            "work": SINK_WORK[sink_name], "arrived": arrived1 - arrived0,
            "dropped_at_socket": (dropped1 - dropped0 if dropped0 is not None
                                  and dropped1 is not None else None)}
    out["mode"] = out["last_round"]["xdp"]["runs"]["tokensender"]["mode"]
    out["cpu"] = cpu
    return out
