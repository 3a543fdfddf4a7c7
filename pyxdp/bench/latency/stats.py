# SPDX-License-Identifier: Apache-2.0
"""The latency section's percentiles: nearest rank (the smallest latency
that at least that share of frames did not exceed), so each is a latency
some frame had, and p50 <= p99 <= p99.9 <= max by construction. (The
1e-9: 0.99 * 100 is 99.00000000000001 in floating point, rank 99 all the same.)"""

import math

import numpy as np

QUANTILES = {"p50_us": 0.5, "p99_us": 0.99, "p999_us": 0.999}


def percentiles(latency_ns: np.ndarray) -> dict[str, float]:
    """p50, p99, p99.9 and the max of LATENCY_NS, in µs (empty: zeros)."""
    n = len(latency_ns)
    if not n:
        return {**dict.fromkeys(QUANTILES, 0.0), "max_us": 0.0}
    ordered = np.sort(latency_ns)
    out = {key: float(ordered[max(1, math.ceil(q * n - 1e-9)) - 1]) / 1e3
           for key, q in QUANTILES.items()}
    out["max_us"] = float(ordered[-1]) / 1e3
    return out
