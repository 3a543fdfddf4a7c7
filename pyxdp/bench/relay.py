"""The TCP relay benchmark: frames/s and frame latency three ways, side by
side in one run: through the in-kernel relay (sockmap + stream parser),
through the asyncio reference relay, and over a direct connection.

The load is 13-byte frames (5-byte header, 8-byte payload), about one
token's text each. A generator process streams them; a receiver process
reads them. Neither works a frame at a time in Python, so that neither is
what is measured:
- the generator sends frames in batches (256 per send when flooding), each
  batch stamped once with CLOCK_MONOTONIC in its frames' payloads;
- the receiver reads up to 1 MiB per recv and checks and times every frame
  of it at once with numpy: each must be a whole 13-byte TOKEN frame (a
  partial or merged frame fails the run), and its latency is the time of
  the recv that completed it minus its stamp.
The CPU time of each process and the host's busy fraction are reported, to
show which part ran out of CPU.

Two phases per way and stream count (by default 1 and 64 concurrent
streams):
- flood: a fixed number of frames (split over the streams) as fast as they
  go; frames/s from the first byte received to the last DONE, and latency
  under that load (mostly time queued on the way);
- paced: 10,000 frames/s in total, a load every way carries, for the
  latency of the path itself.
Rounds interleave the three ways; each figure is the median of the rounds
(cpu_s is the last round's), and ratios are taken within a round (the
machine is shared and noisy).

This is the `relay` section of `zerolayer bench`: measure() returns what
it reports under `relay`, targets() the section's targets.
"""

import json
import os
import selectors
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyxdp.bench.figures import figure
from pyxdp.proto import frames
from pyxdp.proto.frames import FrameType
from pyxdp.relay import sockets as relay_sockets

FRAME = struct.Struct("!IBQ")  # a bench frame: length 8, type, u64 (stamp, or count for DONE)
FRAME_LEN = FRAME.size  # 13
WAYS = ("sockmap", "asyncio", "direct")


@dataclass(frozen=True)
class Plan:
    rounds: int
    flood_frames: int  # all streams together
    paced_s: float
    streams: tuple[int, ...] = (1, 64)
    paced_rate: int = 10_000  # frames/s, all streams together
    flood_batch: int = 256


FULL = Plan(rounds=5, flood_frames=2_000_000, paced_s=2.0)
QUICK = Plan(rounds=1, flood_frames=200_000, paced_s=0.2)


# --- the generator process ------------------------------------------------------------

class _Stream:
    """One generator connection: waits for its REQUEST, then sends."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.inbuf = b""
        self.params: dict = {}  # the REQUEST's, once it came
        self.out = b""
        self.sent = 0
        self.end = 0.0
        self.next_due = 0.0
        self.finished = False

    def start(self, params: dict) -> None:
        self.params = params
        now = time.monotonic()
        self.end = now + params.get("seconds", 0)
        self.next_due = now

    def more(self) -> bool:
        """Frames left to send: by count (flood), or by time (paced)."""
        if "frames" in self.params:
            return self.sent < self.params["frames"]
        return time.monotonic() < self.end

    def batch(self, count: int) -> bytes:
        if "frames" in self.params:
            count = min(count, self.params["frames"] - self.sent)
        frame = FRAME.pack(8, FrameType.TOKEN, time.monotonic_ns())
        self.sent += count
        return frame * count

    def done_frame(self) -> bytes:
        self.finished = True
        return FRAME.pack(8, FrameType.DONE, self.sent)


def _generator_main(conn) -> None:
    """Serve bench streams until told to stop. A stream's REQUEST payload
    (JSON) says {"frames": N, "batch": B, "interval": 0}: N frames, B per
    send, back to back; or {"seconds": S, "batch": B, "interval": I}: B
    frames every I seconds for S seconds. Then a DONE carrying the count."""
    lst = relay_sockets.listener("127.0.0.1:0")
    lst.setblocking(False)
    conn.send(relay_sockets.format_address(lst.getsockname()))
    sel = selectors.DefaultSelector()
    sel.register(lst, selectors.EVENT_READ, "listen")
    sel.register(conn.fileno(), selectors.EVENT_READ, "control")
    streams: dict[int, _Stream] = {}
    while True:
        paced = [s for s in streams.values() if s.params and not s.finished and s.params["interval"]]
        timeout = None
        if paced:
            timeout = max(0.0, min(s.next_due for s in paced) - time.monotonic())
        for key, events in sel.select(timeout):
            if key.data == "control":
                return
            if key.data == "listen":
                try:
                    sock, _ = lst.accept()
                except BlockingIOError:
                    continue
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                streams[sock.fileno()] = _Stream(sock)
                sel.register(sock, selectors.EVENT_READ, "stream")
                continue
            st = streams[key.fd]
            if events & selectors.EVENT_READ:
                if not _gen_read(st):
                    sel.unregister(st.sock)
                    del streams[key.fd]
                    st.sock.close()
                    continue
            if st.out:
                _gen_write(st, sel)
        now = time.monotonic()
        for st in paced:
            if now >= st.next_due and not st.out:
                st.out = st.batch(st.params["batch"]) if st.more() else st.done_frame()
                st.next_due += st.params["interval"]
                _gen_write(st, sel)


def _gen_read(st: _Stream) -> bool:
    """Read the REQUEST (or the receiver's close: False)."""
    try:
        data = st.sock.recv(65536)
    except ConnectionError:
        return False
    if not data:
        return False
    st.inbuf += data
    if not st.params:
        for frame in frames.StreamDecoder().feed(st.inbuf):
            if frame.type is FrameType.REQUEST:
                st.start(json.loads(frame.payload))
                st.inbuf = b""
                if not st.params["interval"]:
                    st.out = st.batch(st.params["batch"])
                break
    return True


def _gen_write(st: _Stream, sel) -> None:
    flooding = not st.params["interval"]
    while st.out:
        try:
            n = st.sock.send(st.out)
        except BlockingIOError:
            break
        except ConnectionError:
            st.out, st.finished = b"", True
            break
        st.out = st.out[n:]
        if not st.out and flooding and not st.finished:
            st.out = st.batch(st.params["batch"]) if st.more() else st.done_frame()
    want = selectors.EVENT_READ | (selectors.EVENT_WRITE if st.out else 0)
    sel.modify(st.sock, want, "stream")


# --- the receiver process -------------------------------------------------------------

def _receiver_main(conn) -> None:
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            conn.send(_receive(**job))
        except Exception as exc:  # reported, and the run fails
            conn.send({"error": f"{type(exc).__name__}: {exc}"})


@dataclass
class _Received:
    """What the receiver knows of one stream."""

    sock: socket.socket
    carry: bytes = b""  # the start of a frame, completed by the next recv
    tokens: int = 0
    sent: int | None = None  # the count its DONE carried
    first: int | None = None  # monotonic ns of its first recv
    last: int = 0  # and of the recv that completed its DONE


def _receive(address: str, streams: int, params: dict, timeout: float) -> dict:
    import numpy as np

    rec = np.dtype([("len", ">u4"), ("type", "u1"), ("val", ">u8")])  # FRAME
    request = frames.encode(FrameType.REQUEST, json.dumps(params))
    socks = [relay_sockets.connect(address) for _ in range(streams)]
    sel = selectors.DefaultSelector()
    state: dict[int, _Received] = {}
    for s in socks:
        s.sendall(request)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        state[s.fileno()] = _Received(s)
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    latencies: list = []
    errors: list[str] = []
    open_streams = len(socks)
    deadline = time.monotonic() + timeout
    try:
        while open_streams:
            if time.monotonic() > deadline:
                errors.append(f"{open_streams} streams unfinished after {timeout:g} s")
                break
            for key, _ in sel.select(1.0):
                st = state[key.fd]
                n = st.sock.recv_into(view)
                now = time.monotonic_ns()
                if n == 0:
                    errors.append("stream ended before its DONE")
                    sel.unregister(st.sock)
                    open_streams -= 1
                    continue
                if st.first is None:
                    st.first = now
                data = st.carry + bytes(view[:n]) if st.carry else view[:n]
                whole = len(data) // FRAME_LEN
                st.carry = bytes(data[whole * FRAME_LEN:])
                if not whole:
                    continue
                arr = np.frombuffer(data, dtype=rec, count=whole)
                last_done = arr["type"][-1] == FrameType.DONE
                tokens = arr[:-1] if last_done else arr
                if (arr["len"] != 8).any() or (tokens["type"] != FrameType.TOKEN).any():
                    errors.append("a partial, merged or foreign frame was delivered")
                tokens_n = len(tokens)
                st.tokens += tokens_n
                if tokens_n:
                    latencies.append(now - tokens["val"].astype(np.int64))
                if last_done:
                    st.sent, st.last = int(arr["val"][-1]), now
                    if st.carry:
                        errors.append("bytes after DONE")
                    sel.unregister(st.sock)
                    open_streams -= 1
    finally:
        for s in socks:
            s.close()
    done = [st for st in state.values() if st.sent is not None]
    received = sum(st.tokens for st in done)
    sent = sum(st.sent or 0 for st in done)
    if received != sent:
        errors.append(f"{sent - received} frames sent were not received")
    lat = np.concatenate(latencies) if latencies else np.zeros(1, dtype=np.int64)
    firsts = [st.first for st in done if st.first is not None]  # all of them: DONE came in a recv
    span_ns = max(st.last for st in done) - min(firsts) if firsts else 0
    p50, p99, p999 = np.percentile(lat, [50, 99, 99.9]) / 1000
    return {
        "frames": received,
        "seconds": round(span_ns / 1e9, 4),
        "frames_per_s": round(received / (span_ns / 1e9), 1) if span_ns else 0.0,
        "latency_us": {"p50": round(float(p50), 1), "p99": round(float(p99), 1),
                       "p999": round(float(p999), 1), "max": round(float(lat.max()) / 1000, 1)},
        "errors": errors,
    }


# --- the asyncio relay process ------------------------------------------------------------

def _asyncio_relay_main(conn, upstream: str) -> None:
    from pyxdp.relay.asyncio_relay import AsyncioRelay

    relay = AsyncioRelay("127.0.0.1:0", upstream).start()
    conn.send(relay.address)
    conn.recv()  # until told to stop
    relay.stop()


# --- the run ----------------------------------------------------------------------------

class _Worker:
    def __init__(self, ctx, target, *args):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()

    def cpu_s(self) -> float:
        import psutil

        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        """Tell the process to end (None), then make sure it has."""
        if self.proc.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        self.conn.close()


def _host_busy() -> tuple[int, int]:
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _one(way: str, streams: int, phase: str, plan: Plan, address: str, workers: dict) -> dict:
    params: dict[str, float]
    if phase == "flood":
        params = {"frames": plan.flood_frames // streams, "batch": plan.flood_batch, "interval": 0}
        seconds = 60.0
    else:
        interval = max(0.001, streams / plan.paced_rate)
        params = {"seconds": plan.paced_s, "batch": max(1, round(plan.paced_rate * interval / streams)),
                  "interval": interval}
        seconds = plan.paced_s
    procs = {"generator": workers["generator"], "receiver": workers["receiver"]}
    if way == "asyncio":
        procs["relay"] = workers["asyncio"]
    cpu0 = {name: w.cpu_s() for name, w in procs.items()}
    own0, busy0 = _own_cpu_s(), _host_busy()
    workers["receiver"].conn.send({"address": address, "streams": streams, "params": params,
                                   "timeout": seconds + 60})
    result = workers["receiver"].conn.recv()
    busy1, own1 = _host_busy(), _own_cpu_s()
    if "error" in result:
        result = {"frames": 0, "seconds": 0, "frames_per_s": 0.0, "latency_us": None,
                  "errors": [result["error"]]}
    cpu = {name: round(w.cpu_s() - cpu0[name], 3) for name, w in procs.items()}
    if way == "sockmap":
        cpu["relay"] = round(own1 - own0, 3)  # its control plane; the kernel's work is not in it
    cpu["host_busy"] = round((busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 3)
    result["cpu_s"] = cpu
    if phase == "paced":
        result["offered_per_s"] = plan.paced_rate
    return result


def measure(plan: Plan = FULL, progress: Callable[[str], None] = lambda line: None) -> dict:
    """Measure as PLAN says; returns the `relay` section of the bench report
    (see the module doc). Needs root (the sockmap relay) and loopback."""
    import multiprocessing

    from pyxdp.relay.sockmap_relay import Relay, serve_in_thread

    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding bcc and threads
    workers: dict[str, _Worker] = {}
    runs = []
    try:
        workers["generator"] = _Worker(ctx, _generator_main)
        upstream = workers["generator"].conn.recv()
        workers["receiver"] = _Worker(ctx, _receiver_main)
        workers["asyncio"] = _Worker(ctx, _asyncio_relay_main, upstream)
        addresses = {"asyncio": workers["asyncio"].conn.recv(), "direct": upstream}
        progress("compiling and loading the sockmap relay")
        # The flood outruns any relay: its backlog must not count as a slow reader.
        relay = Relay("127.0.0.1:0", upstream, max_pairs=max(plan.streams),
                      max_backlog=2 * plan.flood_frames * FRAME_LEN)
        try:
            thread = serve_in_thread(relay)
            try:
                addresses["sockmap"] = relay.address
                for r in range(plan.rounds):
                    for streams in plan.streams:
                        for phase in ("flood", "paced"):
                            for way in WAYS:
                                progress(f"round {r + 1}/{plan.rounds}: {streams} stream"
                                         f"{'s' if streams > 1 else ''}, {phase}, {way}")
                                res = _one(way, streams, phase, plan, addresses[way], workers)
                                runs.append({"round": r, "streams": streams, "phase": phase,
                                             "way": way, **res})
                relay_stats = relay.stats()
            finally:
                relay.stop()
                thread.join(10)
        finally:
            relay.close()
    finally:
        for worker in workers.values():
            worker.stop()
    return {
        "load": {"frame_bytes": FRAME_LEN, "payload_bytes": 8, "streams": list(plan.streams),
                 "flood_batch": plan.flood_batch, "flood_frames": plan.flood_frames,
                 "paced_rate": plan.paced_rate, "paced_s": plan.paced_s, "rounds": plan.rounds},
        "results": _summarize(runs, plan),
        "sockmap_relay": {"pairs": relay_stats["pairs"], "closed": relay_stats["closed"],
                          "malformed": relay_stats["counters"]["malformed"]},
        "errors": sorted({e for run_ in runs for e in run_["errors"]}),
        "runs": runs,
    }


def _summarize(runs: list[dict], plan: Plan) -> dict:
    """Per stream count: each way's figures, and the within-round ratios."""
    out = {}
    for streams in plan.streams:
        by = {}
        for way in WAYS:
            sel = {ph: [r for r in runs if r["way"] == way and r["streams"] == streams
                        and r["phase"] == ph and r["latency_us"]] for ph in ("flood", "paced")}
            if not sel["flood"] or not sel["paced"]:
                continue
            by[way] = {
                "frames_per_s": figure(r["frames_per_s"] for r in sel["flood"]),
                "flood_latency_us": {q: figure(r["latency_us"][q] for r in sel["flood"])
                                     for q in ("p50", "p99")},
                "paced_latency_us": {q: figure(r["latency_us"][q] for r in sel["paced"])
                                     for q in ("p50", "p99")},
                "cpu_s": {ph: sel[ph][-1]["cpu_s"] for ph in sel},
            }
        ratios = {}
        if {"sockmap", "asyncio", "direct"} <= by.keys():
            ratios = {
                "throughput_vs_asyncio": figure(_per_round(runs, streams, "flood", "frames_per_s", "asyncio")),
                "throughput_vs_direct": figure(_per_round(runs, streams, "flood", "frames_per_s", "direct")),
                "paced_p99_vs_asyncio": figure(_per_round(runs, streams, "paced", "p99", "asyncio")),
                "flood_p99_vs_asyncio": figure(_per_round(runs, streams, "flood", "p99", "asyncio")),
            }
        out[str(streams)] = {"ways": by, "sockmap_ratio": ratios}
    return out


def _per_round(runs, streams, phase, key, other) -> list[float]:
    """sockmap's KEY over OTHER's, within each round."""
    def value(r):
        return r["frames_per_s"] if key == "frames_per_s" else r["latency_us"][key]

    out = []
    for rnd in sorted({r["round"] for r in runs}):
        pick = {r["way"]: r for r in runs if r["round"] == rnd and r["streams"] == streams
                and r["phase"] == phase and r["latency_us"]}
        if "sockmap" in pick and other in pick and value(pick[other]):
            out.append(value(pick["sockmap"]) / value(pick[other]))
    return out or [0.0]


def targets(section: dict, prefix: str = "") -> list[dict]:
    """The relay's targets against SECTION (what measure() returned), per
    stream count measured; a key is PREFIX plus the ratio's path in SECTION."""
    out = []
    for streams, result in section["results"].items():
        ratios = result["sockmap_ratio"]
        if not ratios:
            continue
        tput = ratios["throughput_vs_asyncio"]["median"]
        p99 = ratios["paced_p99_vs_asyncio"]["median"]
        n = f"{streams} stream{'s' if streams != '1' else ''}"
        out.append({"what": f"frames/s through the sockmap relay against the asyncio relay, {n}",
                    "kind": "target",
                    "key": f"{prefix}results.{streams}.sockmap_ratio.throughput_vs_asyncio",
                    "bound": ">= 3.0", "measured": round(tput, 3), "met": tput >= 3.0})
        out.append({"what": f"p99 frame latency (paced load) against the asyncio relay, {n}",
                    "kind": "target",
                    "key": f"{prefix}results.{streams}.sockmap_ratio.paced_p99_vs_asyncio",
                    "bound": "< 1.0", "measured": round(p99, 3), "met": 0 < p99 < 1.0})
    return out
