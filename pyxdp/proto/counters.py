"""The counter schema: the order of struct zl_counters (bpf/zl_structs.h) and
the JSON shape of `zerolayer stats` (docs/spec.md §3).

Internally counters are flat dicts with dotted keys ("frames.token");
nest() gives the JSON shape.
"""

import struct

FRAME_LABELS = ("request", "token", "done", "ping", "pong")
REASONS = ("short_header", "truncated", "unknown_type", "too_many_frames")

# Field order of struct zl_counters. Change both together.
FIELDS = (
    "packets",
    "other",
    "fragments",
    "token_datagrams",
    *(f"frames.{t}" for t in FRAME_LABELS),
    "payload_bytes",
    "redirected",
    "fallback_passed",
    *(f"malformed.{r}" for r in REASONS),
    "malformed_dropped",
    "malformed_passed",
)
LAYOUT = struct.Struct(f"={len(FIELDS)}Q")


def zero() -> dict[str, int]:
    return dict.fromkeys(FIELDS, 0)


def from_percpu(raw: bytes, ncpus: int, fields=FIELDS) -> dict[str, int]:
    """Sum one struct of u64 FIELDS (zl_counters by default) per possible CPU."""
    layout = struct.Struct(f"={len(fields)}Q")
    total = [0] * len(fields)
    for cpu in range(ncpus):
        for i, value in enumerate(layout.unpack_from(raw, cpu * layout.size)):
            total[i] += value
    return dict(zip(fields, total))


def delta(after: dict[str, int], before: dict[str, int], fields=FIELDS) -> dict[str, int]:
    return {k: after[k] - before[k] for k in fields}


def nest(flat: dict[str, int] | dict[str, float], fields=FIELDS) -> dict:
    """Flat dotted keys to the JSON shape of `zerolayer stats --json`."""
    out: dict = {}
    for key in fields:
        group, _, name = key.partition(".")
        if name:
            out.setdefault(group, {})[name] = flat[key]
        else:
            out[key] = flat[key]
    return out


def flatten(nested: dict, fields=FIELDS) -> dict[str, int]:
    flat = {}
    for key in fields:
        group, _, name = key.partition(".")
        flat[key] = nested[group][name] if name else nested[key]
    return flat
