# SPDX-License-Identifier: Apache-2.0
"""Every BPF program zerolayer ships loads on the running kernel: its
object (built once by clang) is fitted to this kernel by libbpf and the
verifier accepts it. What
each program does is tested elsewhere; this is the one list of them all, so
a kernel that rejects any names it here. The generator needs Linux 5.18
(live-frames test runs, bpf_xdp_store_bytes): an older kernel must refuse
it in one line that says so."""

import errno

import pytest

from pyxdp.bench.floors import CountProgram, PassProgram
from pyxdp.errors import ZerolayerError
from pyxdp.lab import generator
from pyxdp.relay.datapath import RelayDataPath
from pyxdp.streams.probes import Probes
from pyxdp.xdp import compiler

pytestmark = [pytest.mark.root]

# name -> a loader whose result has close(), with the product's own program
# names, maps and compile flags.
PROGRAMS = {
    "xdp_token.bpf.c (the parser)": compiler.load_token,
    "xdp_tx.bpf.c (the generator)": lambda: generator.load_program(),
    "xdp_count.bpf.c (bench floor)": CountProgram,
    "xdp_count.bpf.c (forwarding bench sink)": lambda: CountProgram("drop"),
    "xdp_pass.bpf.c (bench floor)": PassProgram,
    "sk_relay.bpf.c (the TCP relay)": RelayDataPath,
    "streams.bpf.c (the stream observer: CO-RE, tracepoints attached)": Probes,
}


@pytest.mark.kernel
@pytest.mark.smoke
@pytest.mark.parametrize("name", PROGRAMS)
def test_program_loads(name):
    # a kernel without live frames (before 5.18) refuses the generator's helper;
    # one that has them but refuses their test runs (EPERM) still loads it
    if name.startswith("xdp_tx.bpf.c") and generator.live_frames_refused() == errno.EINVAL:
        with pytest.raises(ZerolayerError, match="needs the BPF helper .* Linux 5.18 or newer"):
            PROGRAMS[name]()
        return
    PROGRAMS[name]().close()


def test_after_zerolayer_build_no_program_compiles(monkeypatch, tmp_path):
    """`zerolayer build` (the command itself, as provisioning runs it, into
    an empty cache of this test's) builds every object a command loads:
    after it, loading every program of the list, and the bench's tracepoint
    floor, starts no clang. Not in the kernel matrix: a build is the same on
    every kernel, each VM image runs `zerolayer build` as it is made, and
    under TCG this test's builds alone took 92 s a kernel."""
    import json

    from click.testing import CliRunner

    from pyxdp.bench.streams.loops import BareTracepoints
    from pyxdp.cli.build_commands import build
    from pyxdp.kernel import root_dirs
    from pyxdp.xdp import objects

    monkeypatch.setattr(objects, "CACHE", root_dirs.Tree(str(tmp_path / "zerolayer")))
    done = CliRunner().invoke(build, ["--json"], catch_exceptions=False)
    report = json.loads(done.output)
    assert report["cached"] == 0 and report["built"] == len(compiler.SHIPPED) >= 10, report

    def compiled(*args):
        raise AssertionError(f"compiled at load, after zerolayer build: {args[1]}")

    monkeypatch.setattr(objects, "_compile", compiled)
    for name, loader in PROGRAMS.items():
        if name.startswith("xdp_tx.bpf.c") and generator.live_frames_refused() == errno.EINVAL:
            continue
        loader().close()
    with BareTracepoints():
        pass
