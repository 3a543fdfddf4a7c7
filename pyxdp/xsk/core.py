# SPDX-License-Identifier: Apache-2.0
"""Which core does the per-batch work of pyxdp.xsk: the compiled one
(pyxdp/xsk/_core.c, built by `pip install` where gcc and the Python
headers exist) or the pure one (numpy and libxdp through ctypes).

Both give the same answers (tests hold each to the reference judge); the
compiled core is much faster where a numpy call costs microseconds
(docs/spec.md §8.1), since a batch is then one C call and a loop, not
dozens of numpy calls. `compiled` is the module, or None where it was not
built; use() chooses, for tests and for the bench's side-by-side.
"""

import ctypes
from contextlib import contextmanager
from types import ModuleType

import numpy as np

_built: ModuleType | None
try:
    import pyxdp.xsk._core as _built
except ImportError:  # no compiler at install: the pure path, slower
    _built = None

BUILT: ModuleType | None = _built
compiled: ModuleType | None = _built

# One record of _core.headers per datagram (struct header_record in _core.c).
HEADER_RECORD = np.dtype([("payload_offset", "=i8"), ("payload_length", "=i8"), ("sport", "=u2"),
                          ("dport", "=u2"), ("ip_version", "u1"), ("src_addr", "u1", 16),
                          ("dst_addr", "u1", 16), ("pad", "u1", 3)])
assert HEADER_RECORD.itemsize == 56


def name() -> str:
    return "compiled" if compiled is not None else "pure"


@contextmanager
def use(which: str):
    """Within the block, pyxdp.xsk uses WHICH core ("compiled" or "pure");
    "compiled" where it was not built raises RuntimeError."""
    global compiled
    if which == "compiled" and BUILT is None:
        raise RuntimeError("pyxdp.xsk._core was not built (no C compiler or Python headers "
                           "at install): reinstall with gcc and python3-dev")
    before, compiled = compiled, (BUILT if which == "compiled" else None)
    try:
        yield
    finally:
        compiled = before


def ring_address(ring: ctypes.Structure) -> int:
    """Where libxdp's ring struct lives, for _core's ring functions."""
    return ctypes.addressof(ring)
