# SPDX-License-Identifier: Apache-2.0
"""The two builds of the XDP parser (docs/spec.md §1.7), which one this
kernel gets, and which one a loaded program is.

The full parser reads frame headers past the direct-read window with
bpf_xdp_load_bytes (Linux 5.18). Where the kernel lacks that helper, the
loader builds the direct parser instead: it reads only what direct packet
access reaches and passes, unjudged, a datagram whose next header lies past
the window, in the counter only the direct parser has (its row in
pyxdp.proto.counters says so). The variant is in the program's own
name, so `status` and `stats` read it from the program attached, not from
the kernel they run on.
"""

import functools

from pyxdp.kernel import bpfsys
from pyxdp.proto import counters, judge

FULL, DIRECT = "full", "direct"
# The C function (and so the kernel's program name, at most 15 characters)
# of each variant, passed to the C as ZL_XDP_PROGRAM.
PROGRAM_NAMES = {FULL: "zerolayer_xdp", DIRECT: "zerolayer_xdp_d"}

BPF_FUNC_XDP_LOAD_BYTES = 189  # uapi/linux/bpf.h, Linux 5.18


@functools.cache
def for_this_kernel() -> str:
    """FULL where the verifier knows bpf_xdp_load_bytes, else DIRECT.
    Probed once per process (a three-instruction program, no compile)."""
    has = bpfsys.has_helper(bpfsys.BPF_PROG_TYPE_XDP, BPF_FUNC_XDP_LOAD_BYTES)
    return FULL if has else DIRECT


def of_program(name: str | None) -> str | None:
    """The variant of a loaded zerolayer program, by its kernel name."""
    return next((v for v, n in PROGRAM_NAMES.items() if n == name), None)


def note(variant: str) -> str | None:
    """What `attach` says about VARIANT, one line; None for the full parser."""
    if variant == FULL:
        return None
    return ("this kernel lacks bpf_xdp_load_bytes (Linux 5.18): datagrams with a frame header "
            f"more than {judge.DIRECT_MAX} bytes into the packet are passed unjudged and "
            f"counted as {_direct_only_counter()}")


def _direct_only_counter() -> str:
    return next(m.name for m in counters.COUNTERS if m.parser == DIRECT)
