# SPDX-License-Identifier: Apache-2.0
"""The programs zerolayer's is measured against, built by clang from C
kept out of the product's bpf/: XDP_PASS alone (pyxdp/lab/xdp_pass.bpf.c, where
the routed lab needs it too) and count-and-pass (xdp_count.bpf.c, beside this
module)."""

import os
from pathlib import Path

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys
from pyxdp.lab.routed_lab import PASS_BUILD, PASS_FUNCTION
from pyxdp.proto import counters
from pyxdp.xdp import compiler

COUNT_BUILD = compiler.shipped("xdp_count.bpf.c", directory=Path(__file__).parent)
COUNT_MAPS = {"count": "zl_count"}


class PassProgram:
    """The floor: a program that only returns XDP_PASS."""

    def __init__(self):
        self._loaded = compiler.load(PASS_BUILD, PASS_FUNCTION)
        self.prog_fd = self._loaded.prog_fd

    def close(self) -> None:
        self._loaded.close()


class FragsPassProgram:
    """The floor for packets in several buffers: XDP_PASS alone, loaded
    with BPF_F_XDP_HAS_FRAGS (two instructions: nothing to compile)."""

    def __init__(self):
        self.prog_fd = bpfsys.load_raw(bpfsys.BPF_PROG_TYPE_XDP, bpfsys.XDP_PASS_PROGRAM,
                                       prog_flags=bpfsys.BPF_F_XDP_HAS_FRAGS)

    def close(self) -> None:
        os.close(self.prog_fd)


class CountProgram:
    """xdp_count.bpf.c: counts every packet and passes it (or, as
    VERDICT="drop", drops it)."""

    def __init__(self, verdict: str = "pass"):
        self._loaded = compiler.load(COUNT_BUILD, f"xdp_count_{verdict}", maps=COUNT_MAPS)
        self.prog_fd = self._loaded.prog_fd
        self._map_fd = self._loaded.map_fds["count"]

    def packets(self) -> int:
        ncpus = bpfsys.possible_cpus()
        raw = bpfsys.map_lookup(self._map_fd, bytes(4), 8 * ncpus)
        if raw is None:  # an array's entry 0 is always there
            raise ZerolayerError("the count-and-pass program's counter map has no entry 0")
        return counters.from_percpu(raw, ncpus, fields=("packets",))["packets"]

    def close(self) -> None:
        self._loaded.close()
