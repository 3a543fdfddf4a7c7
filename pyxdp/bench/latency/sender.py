# SPDX-License-Identifier: Apache-2.0
"""The paced sender of the latency section: paced_sender.c (beside this
module, which says why it is C), compiled at bench time by
pyxdp.bench.c_build into a directory made for the run and removed after
it, and run in the lab's peer namespace for one load."""

import contextlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pyxdp.bench import c_build
from pyxdp.errors import ZerolayerError
from pyxdp.kernel.signals import die_with_parent
from pyxdp.proto.frames import DEFAULT_PORT

SOURCE = Path(__file__).with_name("paced_sender.c")
SLACK_S = 30.0  # past the load's own seconds: the sender has failed


@contextlib.contextmanager
def built() -> Iterator[tuple[str, str]]:
    """The sender compiled into a directory of its own (removed on exit):
    its path, and the compiler's first --version line. Without a compiler,
    or on a compile error, one line says why."""
    workdir = tempfile.mkdtemp(prefix="zerolayer-paced-sender-")
    try:
        try:
            done = c_build.compile_c(SOURCE, workdir)
        except c_build.NoCompiler as exc:
            raise ZerolayerError(f"the latency section's sender is C: {exc}") from None
        if done.binary is None:
            raise ZerolayerError(f"compiling {SOURCE.name} failed: {done.first_error()}")
        yield done.binary, done.compiler
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def send(binary: str, lab, *, streams: int, rate: int, seconds: float,
         cpu: int | None) -> dict:
    """One load from LAB's peer to its dut (UDP port DEFAULT_PORT), pinned
    to CPU when given: what the sender reports (sent, send_errors, seconds,
    frames_per_s, late_p50_us, late_p99_us, late_max_us)."""
    args = [binary, "--src", lab.peer.ipv4, "--dst", lab.dut.ipv4, "--port", str(DEFAULT_PORT),
            "--streams", str(streams), "--rate", str(rate), "--seconds", str(seconds)]
    if cpu is not None:
        args += ["--cpu", str(cpu)]
    # A child starts in the network namespace of the thread that forks it.
    with lab.in_peer():
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=seconds + SLACK_S,
                                  preexec_fn=die_with_parent)
        except subprocess.TimeoutExpired:
            raise ZerolayerError(f"the paced sender did not finish a {seconds:g} s load in "
                                 f"{seconds + SLACK_S:g} s") from None
    if proc.returncode != 0 or not proc.stdout.strip():
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode
        raise ZerolayerError(f"the paced sender failed: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
