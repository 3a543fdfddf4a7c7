# SPDX-License-Identifier: Apache-2.0
"""The gaps between a stream's chunks, in bounded memory (docs/spec.md §11.2.4):
the first EXACT gaps exactly (microseconds), then a sparse log-linear
histogram of at most MAX_BINS bins whose resolution halves when the gaps
spread over more bins than that. A bin is 2**-bits of its octave wide and
is read as its middle: at bits 7 (the start) a percentile is within 0.4%,
at bits 5 within 1.6%. The maximum is always exact."""

from array import array
from bisect import bisect_left

EXACT = 256
MAX_BINS = 128
_BITS = 7
_CLAMP = (1 << 32) - 1  # 71 minutes, in microseconds
_EMPTY = array("I")


def _key(v: int, bits: int) -> int:
    if v < (1 << bits):
        return v
    shift = v.bit_length() - bits - 1
    return ((shift + 1) << bits) + (v >> shift) - (1 << bits)


def _bounds(key: int, bits: int) -> tuple[int, int]:
    """The lowest value of a bin and its width."""
    if key < (1 << bits):
        return key, 1
    shift = (key >> bits) - 1
    return ((key & ((1 << bits) - 1)) | (1 << bits)) << shift, 1 << shift


class Gaps:
    __slots__ = ("n", "max", "_exact", "_keys", "_counts", "_bits")

    def __init__(self) -> None:
        self.n = 0
        self.max = 0
        self._exact: array | None = array("I")
        self._keys = self._counts = _EMPTY  # made when the exact gaps run out
        self._bits = _BITS

    def add(self, us: int) -> None:
        if us > _CLAMP:
            us = _CLAMP
        self.n += 1
        if us > self.max:
            self.max = us
        exact = self._exact
        if exact is not None:
            exact.append(us)
            if len(exact) > EXACT:
                self._exact = None
                self._keys, self._counts = array("I"), array("I")
                for v in exact:
                    self._bin(v)
            return
        self._bin(us)

    def _bin(self, us: int) -> None:
        k = _key(us, self._bits)
        keys = self._keys
        i = bisect_left(keys, k)
        if i < len(keys) and keys[i] == k:
            self._counts[i] += 1
            return
        keys.insert(i, k)
        self._counts.insert(i, 1)
        while len(keys) > MAX_BINS:
            self._coarsen()
            keys = self._keys

    def _coarsen(self) -> None:
        old = list(zip(self._keys, self._counts))
        bits = self._bits
        self._bits = bits - 1
        merged: dict[int, int] = {}
        for k, c in old:
            nk = _key(_bounds(k, bits)[0], bits - 1)
            merged[nk] = merged.get(nk, 0) + c
        self._keys = array("I", sorted(merged))
        self._counts = array("I", (merged[k] for k in self._keys))

    def percentile(self, q: float) -> float:
        """The q-quantile (0..1) in microseconds, interpolated between ranks
        as numpy and statistics.median do."""
        rank = q * (self.n - 1)
        lo = int(rank)
        frac = rank - lo
        if self._exact is not None:
            s = sorted(self._exact)
            a = s[lo]
            return a + (s[min(lo + 1, self.n - 1)] - a) * frac
        a = self._at(lo)
        return a + (self._at(min(lo + 1, self.n - 1)) - a) * frac

    def _at(self, rank: int) -> float:
        seen = 0
        for k, c in zip(self._keys, self._counts):
            seen += c
            if seen > rank:
                low, width = _bounds(k, self._bits)
                return min(low + (width - 1) / 2, self.max)
        return float(self.max)

    def summary_ms(self) -> dict | None:
        """{"p50", "p99", "max"} in milliseconds; None below one gap (two chunks)."""
        if not self.n:
            return None
        return {"p50": round(self.percentile(0.5) / 1000, 3),
                "p99": round(self.percentile(0.99) / 1000, 3),
                "max": round(self.max / 1000, 3)}
