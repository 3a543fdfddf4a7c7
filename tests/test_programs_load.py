# SPDX-License-Identifier: Apache-2.0
"""Every BPF program zerolayer ships loads on the running kernel: its
object (built once by clang) is fitted to this kernel by libbpf and the
verifier accepts it. What
each program does is tested elsewhere; this is the one list of them all, so
a kernel that rejects any names it here. The generator needs Linux 5.18
(live-frames test runs, bpf_xdp_store_bytes): an older kernel must refuse
it in one line that says so."""

import pytest

from pyxdp.bench.floors import CountProgram, PassProgram
from pyxdp.errors import ZerolayerError
from pyxdp.lab import generator
from pyxdp.relay.datapath import RelayDataPath
from pyxdp.streams.probes import Probes
from pyxdp.xdp import compiler

pytestmark = [pytest.mark.root, pytest.mark.kernel, pytest.mark.smoke]

# name -> a loader whose result has close(), with the product's own program
# names, maps and compile flags.
PROGRAMS = {
    "xdp_token.c (the parser)": compiler.load_token,
    "xdp_tx.c (the generator)": lambda: generator.load_program(),
    "xdp_count.c (bench floor)": CountProgram,
    "xdp_count.c (forwarding bench sink)": lambda: CountProgram("drop"),
    "xdp_pass.c (bench floor)": PassProgram,
    "sk_relay.c (the TCP relay)": RelayDataPath,
    "streams.c (the stream observer: CO-RE, tracepoints attached)": Probes,
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_loads(name):
    if name.startswith("xdp_tx.c") and not generator.live_frames():
        with pytest.raises(ZerolayerError, match="needs the BPF helper .* Linux 5.18 or newer"):
            PROGRAMS[name]()
        return
    PROGRAMS[name]().close()
