"""What both relays report, in the same names (docs/spec.md §4): the
counters of struct zl_sk_counters (bpf/zl_sk_structs.h) and why a relayed
pair was closed. Userspace-only code (the asyncio relay, the CLI) reads
them without loading the kernel side."""

from pyxdp.proto import counters

# Mirror of bpf/zl_sk_structs.h: change both together.
REASONS = ("unknown_type", "oversize", "desync")  # enum zl_sk_reason - 1
FIELDS = (
    *(f"frames.{t}" for t in counters.FRAME_LABELS),
    "payload_bytes",
    "redirected",
    "no_peer",
    *(f"malformed.{r}" for r in REASONS),
)

# Why a relayed pair was closed. The first reason met wins; the BROKEN ones
# are the peer's fault, and its connection is reset.
CLOSE_REASONS = ("eof", "reset", "unknown_type", "oversize", "short_header", "truncated",
                 "desync", "slow_reader", "drain_timeout", "relay_stopped")
BROKEN = frozenset({"unknown_type", "oversize", "short_header", "truncated", "desync"})
