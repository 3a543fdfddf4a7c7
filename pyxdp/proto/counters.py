# SPDX-License-Identifier: Apache-2.0
"""The counter schema: the order of struct zl_counters (bpf/zl_structs.h) and
the JSON shape of `zerolayer stats` (docs/spec.md §3).

Internally counters are flat dicts with dotted keys ("frames.token");
nest() gives the JSON shape.
"""

import struct

from pyxdp.cstruct import Layout
from pyxdp.proto.frames import FRAME_TYPES

FRAME_LABELS = tuple(t.label for t in FRAME_TYPES)  # by type value: request..pong
# Why a datagram is malformed. The C numbers them from 1 in this order
# (ZL_SHORT_HEADER = 1...: pyxdp.xdp.compiler.shared_defines) and counts
# reason N at malformed[N - 1].
REASONS = ("short_header", "truncated", "unknown_type", "too_many_frames", "bad_checksum")
# Not a reason: the direct parser's walk result for a datagram it passes
# unjudged (docs/spec.md §1.7), counted at beyond_window. The C has it as
# ZL_BEYOND_WINDOW, numbered after the reasons.
BEYOND_WINDOW = "beyond_window"
# Why a token datagram was not forwarded, with forwarding on (docs/spec.md
# §2.1). Numbered from 1 in this order in the C too (ZL_FWD_NO_NEIGHBOUR =
# 1...), counted at forward[N - 1].
FORWARD_REASONS = ("no_neighbour", "local", "ttl", "too_big", "not_forwardable")

# struct zl_counters (bpf/zl_structs.h): change both together.
LAYOUT = Layout(
    "zl_counters",
    ("packets", "Q"),
    ("other", "Q"),
    ("fragments", "Q"),
    ("beyond_window", "Q"),
    ("token_datagrams", "Q"),
    ("frames", f"{len(FRAME_LABELS)}Q"),
    ("payload_bytes", "Q"),
    ("redirected", "Q"),
    ("fallback_passed", "Q"),
    ("malformed", f"{len(REASONS)}Q"),
    ("malformed_dropped", "Q"),
    ("malformed_passed", "Q"),
    ("forwarded", "Q"),
    ("forward", f"{len(FORWARD_REASONS)}Q"),
)
# Its counters in order, flat: "frames.token", "malformed.truncated".
FIELDS = LAYOUT.value_names(frames=FRAME_LABELS, malformed=REASONS, forward=FORWARD_REASONS)


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
