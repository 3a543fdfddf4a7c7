# SPDX-License-Identifier: Apache-2.0
"""What a batch costs Python's receive and send paths, the measurement of
the `core` section of `zerolayer bench` (pyxdp.bench.core.section): the pure
core against the compiled one (pyxdp/xsk/core.py), side by side, at 16, 256
and 1,024 datagrams a batch.

No kernel: the rings and UMEM are pyxdp.xsk.synthetic's, the bench playing
the kernel between batches (untimed), so the figures are the core's
alone, without a socket's system calls:
  receive  RX ring take, Batch.frames() and a walk over every frame (the
           delivery section's touch tier), release to the fill ring;
  send     what TokenSender.send_datagrams does per batch short of the
           kick: the payloads gathered, written into chunks behind their
           headers with lengths and checksums, the descriptors published
           on the TX ring, the completion ring reaped.
Each datagram holds FRAMES 16-byte TOKEN frames (IPv4). A batch's time is
the median of its repetitions; the fixed cost per batch and the cost per
datagram are the intercept and slope of a line through the three sizes.
"""

import statistics
import time
from collections.abc import Callable

import numpy as np

from pyxdp.proto import frames as frames_mod
from pyxdp.xsk import core, headers
from pyxdp.xsk import synthetic as syn
from pyxdp.xsk.batch import Batch

SIZES = (16, 256, 1024)
FRAMES = 4  # TOKEN frames per datagram
PAYLOAD_BYTES = 16
RING = 2048
LOAD = f"IPv4 UDP datagrams of {FRAMES} {PAYLOAD_BYTES}-byte TOKEN frames"
_TEMPLATE = headers.template("02:00:00:00:00:01", "02:00:00:00:00:02", "198.18.0.2",
                             "198.18.0.1", 40000, frames_mod.DEFAULT_PORT)
_PAYLOAD = frames_mod.encode(frames_mod.FrameType.TOKEN, b"t" * PAYLOAD_BYTES) * FRAMES


class Receiver:
    """An RX and a fill ring over a UMEM of RING chunks, each holding one
    datagram, the RX descriptors written once for every slot."""

    def __init__(self):
        self.fill = syn.ring(syn.FillRing, 2 * RING)
        self.rx = syn.ring(syn.RxRing, RING)
        self.xsk = syn.SyntheticUmem(RING, self.fill)
        addr = np.arange(RING, dtype=np.uint64) * np.uint64(syn.CHUNK) + np.uint64(syn.HEADROOM)
        rows, lengths = headers.payload_matrix([_PAYLOAD] * RING)
        frame_len = headers.send_batch(self.xsk.umem, addr, rows, lengths, _TEMPLATE)
        desc = syn.entries(self.rx, 4)
        desc[:, 0:2] = addr.view(np.uint32).reshape(RING, 2)
        desc[:, 2] = frame_len
        self._produced = syn.index(self.rx, "producer")
        self._taken = syn.index(self.fill, "consumer")

    def batch_ns(self, n: int) -> int:
        """One batch of N datagrams through the consumer's side, timed."""
        self._produced += np.uint32(n)  # the kernel: N more received
        t0 = time.perf_counter_ns()
        addr, length = self.rx.take(n)
        batch = Batch(self.xsk, addr, length)
        walked = 0
        for _ftype, _payload in batch.frames():
            walked += 1
        batch.release()
        spent = time.perf_counter_ns() - t0
        self._taken += np.uint32(n)  # the kernel: the chunks filled again
        if walked != n * FRAMES:
            raise RuntimeError(f"the {core.name()} core walked {walked} of {n * FRAMES} frames")
        return spent


class Sender:
    """A TX and a completion ring over a UMEM of RING chunks; the
    completion ring gives back the chunks of each batch after it."""

    def __init__(self):
        self.tx = syn.ring(syn.TxRing, RING)
        self.completion = syn.ring(syn.CompletionRing, RING)
        self.xsk = syn.SyntheticUmem(RING)
        self.addr = np.arange(RING, dtype=np.uint64) * np.uint64(syn.CHUNK)
        syn.entries(self.completion, 2)[:] = self.addr.view(np.uint32).reshape(RING, 2)
        self._consumed = syn.index(self.tx, "consumer")
        self._completed = syn.index(self.completion, "producer")
        self.payloads = [_PAYLOAD] * RING

    def batch_ns(self, n: int) -> int:
        t0 = time.perf_counter_ns()
        rows, lengths = headers.payload_matrix(self.payloads[:n])
        frame_len = headers.send_batch(self.xsk.umem, self.addr[:n], rows, lengths, _TEMPLATE)
        sent = self.tx.put(self.addr[:n], frame_len)
        self.completion.take(RING)
        spent = time.perf_counter_ns() - t0
        if sent != n:
            raise RuntimeError(f"the {core.name()} core published {sent} of {n} descriptors")
        self._consumed += np.uint32(n)  # the kernel: sent, and completed
        self._completed += np.uint32(n)
        return spent


def _median_ns(batch_ns: Callable[[int], int], n: int, repeats: int) -> float:
    batch_ns(n)  # warm
    return statistics.median(batch_ns(n) for _ in range(repeats))


def cores() -> tuple[str, ...]:
    """The cores this install can run: both where the extension was built."""
    return ("pure", "compiled") if core.BUILT is not None else ("pure",)


def measure(rounds: int, repeats: int) -> dict:
    """Per core ("pure", "compiled") and path ("rx", "tx"): per-round lists
    of the ns per batch by size, the fixed ns per batch, the ns per
    datagram and per frame; and compiled against pure, ns per batch by size."""
    out: dict = {}
    for _ in range(rounds):
        for name in cores():
            with core.use(name):
                for path, bench in (("rx", Receiver()), ("tx", Sender())):
                    per = {n: _median_ns(bench.batch_ns, n, repeats) for n in SIZES}
                    line = statistics.linear_regression(SIZES, [per[n] for n in SIZES])
                    r = out.setdefault(name, {}).setdefault(path, {
                        "batch_ns": {str(n): [] for n in SIZES}, "fixed_ns": [],
                        "per_datagram_ns": [], "per_frame_ns": []})
                    for n in SIZES:
                        r["batch_ns"][str(n)].append(per[n])
                    r["fixed_ns"].append(max(line.intercept, 0.0))
                    r["per_datagram_ns"].append(line.slope)
                    r["per_frame_ns"].append(line.slope / FRAMES)
    if "compiled" in out:
        out["speedup"] = {path: {str(n): [p / c for p, c in zip(out["pure"][path]["batch_ns"][str(n)],
                                                              out["compiled"][path]["batch_ns"][str(n)])]
                                 for n in SIZES} for path in ("rx", "tx")}
    return out
