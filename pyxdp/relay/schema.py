# SPDX-License-Identifier: Apache-2.0
"""What both relays report, in the same names (docs/spec.md §4): the
counters of struct zl_sk_counters (bpf/zl_sk_structs.h) and why a relayed
pair was closed. Userspace-only code (the asyncio relay, the CLI) reads
them without loading the kernel side."""

import errno

from pyxdp.cstruct import Layout
from pyxdp.proto import counters

# Why the kernel's stream parser broke a stream. The C numbers them from 1
# in this order (ZL_SK_UNKNOWN_TYPE = 1...: c_defines below)
# and counts reason N at malformed[N - 1].
REASONS = ("unknown_type", "oversize", "desync")
# The socket error each reason becomes (the C's ZL_SK_ERRNO_*): what the
# sockmap relay reads back with SO_ERROR (docs/spec.md §4.2).
ERRNO_REASONS = {errno.EBADMSG: "unknown_type", errno.EMSGSIZE: "oversize", errno.EPROTO: "desync"}


def c_defines() -> dict[str, int]:
    """The relay's C constants (bpf/zl_sk_structs.h, zl_stream.h), by C name:
    the reasons numbered from 1, and the errno of each."""
    d = {f"ZL_SK_{r.upper()}": n for n, r in enumerate(REASONS, 1)}
    d["ZL_SK_REASONS"] = len(REASONS)
    d.update({f"ZL_SK_ERRNO_{r.upper()}": e for e, r in ERRNO_REASONS.items()})
    return d

# struct zl_sk_counters (bpf/zl_sk_structs.h): change both together.
LAYOUT = Layout(
    "zl_sk_counters",
    ("frames", f"{len(counters.FRAME_LABELS)}Q"),
    ("payload_bytes", "Q"),
    ("redirected", "Q"),
    ("no_peer", "Q"),
    ("malformed", f"{len(REASONS)}Q"),
)
FIELDS = LAYOUT.value_names(frames=counters.FRAME_LABELS, malformed=REASONS)

# Why a relayed pair was closed. The first reason met wins; the BROKEN ones
# are the peer's fault, and its connection is reset.
CLOSE_REASONS = ("eof", "reset", "unknown_type", "oversize", "short_header", "truncated",
                 "desync", "slow_reader", "drain_timeout", "relay_stopped")
BROKEN = frozenset({"unknown_type", "oversize", "short_header", "truncated", "desync"})
