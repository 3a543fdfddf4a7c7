# SPDX-License-Identifier: Apache-2.0
"""`zerolayer emit`: a token source over AF_XDP transmit (pyxdp.xsk.sender).

It sends COUNT datagrams (or until stopped), each of FRAMES_PER_DATAGRAM
TOKEN frames of PAYLOAD_SIZE bytes, flat out or paced at RATE datagrams/s,
and reports what the socket did with them (docs/spec.md §5.11).

Every token is numbered, so a capture shows what arrived and in what
order: token t (datagram d, frame j: t = d * FRAMES_PER_DATAGRAM + j) has
as payload t in decimal, zero-padded to 10 digits (its last PAYLOAD_SIZE
digits when the payload is shorter), then FILLER (" tok") repeated and cut
to fill PAYLOAD_SIZE bytes. The datagrams of a batch are built as one numpy matrix.

Pacing sends bursts on a schedule: datagram i is due RATE-th of a second
after the start, and a burst of the datagrams due within PACE_S goes out
at once, so a rate is met on average, not datagram by datagram; the rate
achieved (datagrams over the elapsed time) is reported.
"""

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import link_stats
from pyxdp.proto.frames import HEADER, HEADER_LEN, MAX_FRAMES, FrameType
from pyxdp.xsk.sender import TokenSender

DIGITS = 10
FILLER = b" tok"
PACE_S = 0.001  # a paced burst holds what is due within this long
FLUSH_S = 1.0  # at the end, how long to wait for the kernel to complete what is in flight
_POWERS = 10 ** np.arange(DIGITS - 1, -1, -1, dtype=np.int64)


def token_rows(first: int, n: int, frames_per_datagram: int, payload_size: int) -> np.ndarray:
    """Datagrams FIRST .. FIRST+N-1 as rows of a (n, datagram bytes) matrix."""
    k, b = frames_per_datagram, payload_size
    digits = min(DIGITS, b)
    filler = (FILLER * (b // len(FILLER) + 1))[:b - digits]
    frame = HEADER.pack(b, FrameType.TOKEN) + b"0" * digits + filler
    rows = np.empty((n, k * len(frame)), np.uint8)
    rows[:] = np.frombuffer(frame * k, np.uint8)
    if digits:
        tokens = (first * k + np.arange(n * k, dtype=np.int64)).reshape(n, k)
        text = (tokens[:, :, None] // _POWERS[DIGITS - digits:]) % 10 + ord("0")
        rows.reshape(n, k, len(frame))[:, :, HEADER_LEN:HEADER_LEN + digits] = text
    return rows


@dataclass
class EmitResult:
    """What emit did (docs/spec.md §5.11)."""

    sender: dict
    frames_per_datagram: int
    payload_size: int
    count: int | None
    rate: float | None
    elapsed_s: float = 0.0
    interrupted: bool = False
    submitted: int = 0
    completed: int = 0
    not_sent: dict = field(default_factory=dict)
    ring_full: int = 0
    kicks: int = 0
    kick_errors: dict = field(default_factory=dict)
    statistics: dict = field(default_factory=dict)
    link: dict = field(default_factory=dict)

    @property
    def rate_pps(self) -> float:
        """Datagrams completed per second, from the first submit to the last completion."""
        return self.completed / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_json(self) -> dict:
        s = self.sender
        return {
            "interface": s["interface"], "netns": s["netns"], "queue": s["queue"],
            "mode": s["mode"], "note": s["note"], "to": s["to"], "from": s["from"],
            "route": s["route"], "path_mtu": s["path_mtu"],
            "frames_per_datagram": self.frames_per_datagram, "payload_size": self.payload_size,
            "datagram_bytes": self.frames_per_datagram * (HEADER_LEN + self.payload_size),
            "count": self.count, "rate": self.rate, "submitted": self.submitted, "completed": self.completed,
            "not_sent": self.not_sent, "ring_full": self.ring_full, "kicks": self.kicks,
            "kick_errors": self.kick_errors, "budget": s["budget"], "batch": s["batch"],
            "elapsed_s": round(self.elapsed_s, 6), "rate_pps": round(self.rate_pps, 1),
            "interrupted": self.interrupted, "statistics": self.statistics, "link": self.link,
        }

    def text(self) -> str:
        s = self.sender
        frames = f"{self.frames_per_datagram} TOKEN frame{'s' if self.frames_per_datagram > 1 else ''}"
        line = (f"{self.submitted:,} datagrams ({frames} of {self.payload_size} bytes each) "
                f"submitted to {s['to']} from {s['from']} on {s['interface']} queue "
                f"{s['queue']}, {s['mode']} mode; {self.completed:,} completed in "
                f"{self.elapsed_s:.3f} s ({self.rate_pps:,.0f}/s)")
        lost = {k: v for k, v in self.not_sent.items() if v}
        line += "; not sent: " + (", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in lost.items())
                                  if lost else "none")
        if self.link.get("tx_dropped"):
            line += f"; {s['interface']} itself dropped {self.link['tx_dropped']:,} on transmit"
        if self.ring_full:
            line += f"; waited for room {self.ring_full:,} times"
        if self.kick_errors:
            line += "; kick errors " + ", ".join(f"{k} {v:,}" for k, v in self.kick_errors.items())
        return line + (" (interrupted)" if self.interrupted else "")


def check_shape(frames_per_datagram: int, payload_size: int, max_payload: int) -> None:
    if not 1 <= frames_per_datagram <= MAX_FRAMES:
        raise ZerolayerError(f"frames per datagram must be 1-{MAX_FRAMES}, not "
                             f"{frames_per_datagram}")
    size = frames_per_datagram * (HEADER_LEN + payload_size)
    if size > max_payload:
        raise ZerolayerError(
            f"{frames_per_datagram} frames of {payload_size} bytes make a {size}-byte UDP "
            f"payload; this path carries at most {max_payload}: ask for fewer or smaller frames")


def run(sender: TokenSender, *, count: int | None = None, rate: float | None = None,
        frames_per_datagram: int = 1, payload_size: int = 16,
        stop: threading.Event | None = None) -> EmitResult:
    """Send COUNT datagrams (None: until STOP is set) through SENDER, at RATE
    datagrams/s (None: flat out). A KeyboardInterrupt ends it like STOP."""
    check_shape(frames_per_datagram, payload_size, sender.max_payload)
    if rate is not None and rate <= 0:
        raise ZerolayerError("the rate must be positive")
    stop = stop or threading.Event()
    result = EmitResult(sender.describe(), frames_per_datagram, payload_size, count, rate)
    tx = sender.tx
    assert tx is not None
    length = frames_per_datagram * (HEADER_LEN + payload_size)
    burst = sender.batch if rate is None else max(1, min(sender.batch, round(rate * PACE_S)))
    lengths = np.full(burst, length, np.int64)
    link_before = link_stats.read(sender.iface, sender.netns)
    invalid_before = tx.statistics().tx_invalid_descs
    start = time.monotonic()
    sent = 0
    try:
        while not stop.is_set() and (count is None or sent < count):
            n = burst if count is None else min(burst, count - sent)
            if rate is not None:
                wait = start + sent / rate - time.monotonic()
                if wait > 0:
                    stop.wait(wait)
                    if stop.is_set():
                        break
            sent += sender.send_rows(token_rows(sent, n, frames_per_datagram, payload_size),
                                     lengths[:n])
    except KeyboardInterrupt:
        result.interrupted = True
    result.interrupted = result.interrupted or stop.is_set()
    in_flight = sender.flush(FLUSH_S)
    result.elapsed_s = time.monotonic() - start
    st = tx.statistics()
    t = tx.tally
    result.submitted, result.completed = t.submitted, t.completed
    result.not_sent = {
        "unsubmitted": (count - t.submitted) if count is not None else 0,
        "invalid_descs": st.tx_invalid_descs - invalid_before,
        "driver_dropped": t.driver_dropped,
        "in_flight": in_flight,
    }
    result.ring_full, result.kicks, result.kick_errors = t.ring_full, t.kicks, dict(t.kick_errors)
    result.statistics = st.to_json()
    result.link = link_stats.delta(link_stats.read(sender.iface, sender.netns), link_before)
    return result
