# SPDX-License-Identifier: Apache-2.0
"""The C ceiling of the delivery bench: xsk_consumer.c (beside this module),
an AF_XDP consumer on libxdp that walks every frame as the Python "touch"
tier does, built at bench time and run as one more consumer of the same load.

It is compiled by pyxdp.bench.c_build into a directory made for the run and
removed after it. Without a compiler, or
without libxdp's and libbpf's headers (Debian: libxdp-dev, libbpf-dev), it is
skipped and Build.skipped says why; any other compile error is a bug and
stops the bench, with the compiler's log kept.
"""

import contextlib
import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyxdp.bench import c_build
from pyxdp.errors import ZerolayerError
from pyxdp.kernel.signals import die_with_parent
from pyxdp.xdp import pins

SOURCE = Path(__file__).with_name("xsk_consumer.c")
LIBS = ("-lxdp", "-lbpf")
DEV_PACKAGES = "libxdp-dev libbpf-dev"
READY_TIMEOUT_S = 10.0
RESULT_TIMEOUT_S = 30.0  # after the sender is done: the consumer's idle wait, and its report
# A header or library of libxdp or libbpf that the compiler or linker did not find.
_MISSING_DEV = re.compile(r"((?:xdp|bpf)/\w+\.h): No such file|cannot find (-l(?:xdp|bpf))")


@dataclass(frozen=True)
class Build:
    binary: str | None
    compiler: str | None  # the compiler's first --version line
    skipped: str | None  # why there is no binary

    def to_json(self) -> dict:
        return {"source": SOURCE.name, "compiler": self.compiler,
                "command": c_build.command(SOURCE, LIBS),
                "skipped": self.skipped}


@contextlib.contextmanager
def built() -> Iterator[Build]:
    """The consumer compiled into a directory of its own, removed on exit."""
    workdir = tempfile.mkdtemp(prefix="zerolayer-xsk-consumer-")
    try:
        yield build(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def build(workdir: str, source: Path = SOURCE) -> Build:
    """SOURCE compiled into WORKDIR, or why not."""
    try:
        done = c_build.compile_c(source, workdir, LIBS)
    except c_build.NoCompiler as exc:
        return Build(None, None, str(exc))
    if done.binary is not None:
        return Build(done.binary, done.compiler, None)
    missing = _MISSING_DEV.search(done.stderr)
    if missing:
        return Build(None, done.compiler, f"{missing.group(1) or missing.group(2)} not found: "
                                          f"install {DEV_PACKAGES}")
    fd, log_path = tempfile.mkstemp(prefix="zerolayer-xsk-consumer-", suffix=".log")
    with os.fdopen(fd, "w") as log:
        log.write(done.stderr)
    raise ZerolayerError(f"compiling {source.name} failed: {done.first_error()} "
                         f"(full log: {log_path})")


class CConsumer:
    """The built consumer on LAB's dut0, queue 0, registered in zerolayer's
    XSKMAP there: a consumer for pyxdp.bench.delivery.xsk_vs_udp, with the Python
    consumers' buffer sizes (XSK_OPTIONS), pinned to CPU when given."""

    def __init__(self, lab, binary: str, count: int, *, cpu: int | None, xsk_options: dict,
                 idle_s: float):
        args = [binary, "--ifname", lab.dut.ifname, "--queue", "0",
                "--xsks-map", os.path.join(pins.pin_dir(lab.dut.ifname, lab.dut.netns), "xsks"),
                "--count", str(count), "--frames", str(xsk_options["frames"]),
                "--chunk-size", str(xsk_options["chunk_size"]),
                "--rx-size", str(xsk_options["rx_size"]), "--idle-ms", str(int(idle_s * 1000))]
        if cpu is not None:
            args += ["--cpu", str(cpu)]
        # A child starts in the network namespace of the thread that forks it.
        with lab.in_dut():
            self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          preexec_fn=die_with_parent)
        self._result: dict = {}
        try:
            self.mode = self._ready()["mode"]
        except BaseException:
            self.close()
            raise

    def _ready(self) -> dict:
        out = self._proc.stdout
        assert out is not None
        if not select.select([out], [], [], READY_TIMEOUT_S)[0]:
            raise ZerolayerError(f"the C consumer did not start in {READY_TIMEOUT_S:.0f} s")
        line = out.readline()
        if not line:
            raise ZerolayerError(f"the C consumer failed: {self._error()}")
        return json.loads(line)

    def _error(self) -> str:
        self._proc.wait(timeout=RESULT_TIMEOUT_S)
        err = self._proc.stderr.read().strip() if self._proc.stderr else ""
        return err.splitlines()[-1] if err else f"exit status {self._proc.returncode}"

    def consume(self, count: int, done: threading.Event) -> tuple[int, float, int]:
        """Wait for the sender; then tell the consumer (its stdin closes) and
        take its report: what it received, its window, what it counted."""
        done.wait()
        try:
            out, err = self._proc.communicate(timeout=RESULT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ZerolayerError(
                f"the C consumer did not finish {RESULT_TIMEOUT_S:.0f} s after the sender"
            ) from None
        if self._proc.returncode != 0 or not out.strip():
            last = err.strip().splitlines()[-1] if err.strip() else ""
            raise ZerolayerError(f"the C consumer failed: {last or self._proc.returncode}")
        self._result = json.loads(out.strip().splitlines()[-1])
        return self._result["received"], self._result["window_s"], self._result["counted"]

    @property
    def statistics(self) -> dict:
        """XDP_STATISTICS as the consumer read it before closing."""
        return self._result["statistics"]

    def details(self) -> dict:
        r = self._result
        return {"mode": self.mode, "frames_walked": r["frames_walked"],
                "frame_types": r["types"], "malformed": r["malformed"],
                "checksum": r["checksum"], "statistics": r["statistics"]}

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.communicate()
