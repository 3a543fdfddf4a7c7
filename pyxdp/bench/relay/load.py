# SPDX-License-Identifier: Apache-2.0
"""The load of the TCP relay benchmark (pyxdp/bench/relay/section.py): a generator
process that streams 13-byte frames and a receiver process that reads and
times them. Every relay of the bench gets the same two, with the same load.

Neither works a frame at a time in Python, so that neither is what is
measured:
- the generator sends frames in batches (256 per send when flooding), each
  batch stamped once with CLOCK_MONOTONIC in its frames' payloads;
- the receiver reads up to 1 MiB per recv and checks and times every frame
  of it at once with numpy: each must be a whole 13-byte TOKEN frame (a
  partial or merged frame fails the run), and its latency is the time of
  the recv that completed it minus its stamp.
"""

import heapq
import itertools
import json
import random
import resource
import selectors
import socket
import struct
import time
from dataclasses import dataclass

from pyxdp.proto import frames
from pyxdp.proto.frames import FrameType
from pyxdp.relay import sockets as relay_sockets

FRAME = struct.Struct("!IBQ")  # a bench frame: length 8, type, u64 (stamp, or count for DONE)
FRAME_LEN = FRAME.size  # 13


def raise_fd_limit() -> tuple[int, int]:
    """Lift this process's open-file limit to its hard limit (512 streams
    need more than the usual 1024 fds in one process); returns the old one."""
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (old[1], old[1]))
    return old


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
        # "spread": each stream's first frame at a random point of its
        # interval, as real streams' phases are, not all at once
        self.next_due = now + (random.uniform(0, params["interval"]) if params.get("spread") else 0)

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


def generator_main(conn) -> None:
    """Serve bench streams until told to stop. A stream's REQUEST payload
    (JSON) says {"frames": N, "batch": B, "interval": 0}: N frames, B per
    send, back to back; or {"seconds": S, "batch": B, "interval": I}: B
    frames every I seconds for S seconds (from a random point of the first
    interval when it also says "spread": true). Then a DONE carrying the count."""
    raise_fd_limit()
    lst = relay_sockets.listener("127.0.0.1:0")
    lst.setblocking(False)
    conn.send(relay_sockets.format_address(lst.getsockname()))
    sel = selectors.DefaultSelector()
    sel.register(lst, selectors.EVENT_READ, "listen")
    sel.register(conn.fileno(), selectors.EVENT_READ, "control")
    streams: dict[int, _Stream] = {}
    # Paced streams by when they are due next: a thousand slow streams cost
    # a heap operation a send, not a scan of them all.
    due: list[tuple[float, int, _Stream]] = []
    order = itertools.count()  # ties in time never compare two streams
    while True:
        timeout = max(0.0, due[0][0] - time.monotonic()) if due else None
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
                waiting = not st.params
                if not _gen_read(st):
                    sel.unregister(st.sock)
                    del streams[key.fd]
                    st.sock.close()
                    st.finished = True  # its entry in DUE, if any, is dropped there
                    continue
                if waiting and st.params and st.params["interval"]:
                    heapq.heappush(due, (st.next_due, next(order), st))
            if st.out:
                _gen_write(st, sel)
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, st = heapq.heappop(due)
            if st.finished:
                continue
            if st.out:  # the last batch still waits for room: try again soon
                heapq.heappush(due, (now + st.params["interval"] / 10, next(order), st))
                continue
            st.out = st.batch(st.params["batch"]) if st.more() else st.done_frame()
            st.next_due += st.params["interval"]
            _gen_write(st, sel)
            if not st.finished:
                heapq.heappush(due, (st.next_due, next(order), st))


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

def receiver_main(conn) -> None:
    raise_fd_limit()
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
