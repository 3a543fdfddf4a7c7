# SPDX-License-Identifier: Apache-2.0
"""The relays zerolayer's are benchmarked against, run on loopback beside
them: socat (a process per connection), haproxy in `mode tcp`, and a small
splice(2) relay in C (splice_relay.c, built by pyxdp.bench.c_build into the
peer's own directory each run). None of them knows frames.

A peer that cannot run here (its program or a compiler is missing) is
skipped with a note, not an error: start_all() returns the peers started and
a note per peer skipped. Every peer is stopped by stop(), also on failure.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pyxdp.bench import c_build
from pyxdp.kernel.signals import die_with_parent

PEERS = ("splice", "socat", "haproxy")
_START_TIMEOUT = 5.0


class PeerSkipped(Exception):
    """This peer cannot run here; the message says why."""


@dataclass
class Peer:
    name: str
    address: str
    proc: subprocess.Popen
    workdir: str

    def stop(self) -> None:
        """End the peer and what it forked (its own process group)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_all(upstream: str, names=PEERS) -> tuple[dict[str, Peer], dict[str, str]]:
    """Start each peer relaying 127.0.0.1:PORT to UPSTREAM (127.0.0.1:PORT).
    Returns the peers started and, for the others, why they were skipped."""
    sweep_stale()
    started: dict[str, Peer] = {}
    skipped: dict[str, str] = {}
    try:
        for name in names:
            try:
                started[name] = _START[name](_port_of(upstream))
            except PeerSkipped as exc:
                skipped[name] = str(exc)
    except BaseException:
        for peer in started.values():
            peer.stop()
        raise
    return started, skipped


def _port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def _spawn(name: str, argv: list[str], workdir: str, port: int | None) -> Peer:
    """Run ARGV in its own process group; wait until 127.0.0.1:PORT (or the
    port the program prints, when PORT is None) is listening."""
    log = open(os.path.join(workdir, "stderr"), "wb")
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=log, start_new_session=True, cwd=workdir,
                                preexec_fn=die_with_parent)
    finally:
        log.close()
    peer = Peer(name, "", proc, workdir)
    try:
        if port is None:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()  # the program says its port, or exits
            if not line.isdigit():
                raise PeerSkipped(f"{name} did not start: {_tail(workdir)}")
            port = int(line)
        deadline = time.monotonic() + _START_TIMEOUT
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise PeerSkipped(f"{name} did not start: {_tail(workdir)}")
            time.sleep(0.02)
        if proc.stdout is not None:
            proc.stdout.close()
        peer.address = f"127.0.0.1:{port}"
        return peer
    except BaseException:
        peer.stop()
        raise


def _tail(workdir: str) -> str:
    with open(os.path.join(workdir, "stderr"), errors="replace") as f:
        lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


def _listening(port: int) -> bool:
    """Is a TCP socket of this network namespace listening on 127.0.0.1:PORT?
    (Read from /proc, not probed: a probe would make the peer connect upstream.)"""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return any(fields[1] == want and fields[3] == "0A"
                   for fields in (line.split() for line in f.readlines()[1:]))


def _free_port() -> int:
    """A port free now on loopback, for peers that cannot report the one they bind."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKDIR_PREFIX = "zl-bench-"


def _workdir(name: str) -> str:
    """A directory for one peer's files, named for this process so that
    sweep_stale() can tell a dead run's from a live one's."""
    return tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-{name}-")


def sweep_stale() -> list[str]:
    """Remove the peer directories of runs whose process is gone (killed
    before it could stop its peers; the peers themselves died with it)."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        pid = path.name[len(WORKDIR_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def _need(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise PeerSkipped(f"{program} is not installed")
    return path


# --- the peers -----------------------------------------------------------------------------

def _socat(upstream_port: int) -> Peer:
    socat = _need("socat")
    port = _free_port()
    # fork: a process per connection, as socat relays are usually run;
    # nodelay on both sides, as every relay of the bench has it.
    argv = [socat, f"TCP4-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,backlog=4096,nodelay",
            f"TCP4:127.0.0.1:{upstream_port},nodelay"]
    return _spawn("socat", argv, _workdir("socat"), port)


_HAPROXY_CFG = """\
global
    maxconn 8192
defaults
    mode tcp
    timeout connect 5s
    timeout client 300s
    timeout server 300s
listen zl_bench
    bind 127.0.0.1:{port}
    server upstream 127.0.0.1:{upstream_port}
"""


def _haproxy(upstream_port: int) -> Peer:
    haproxy = _need("haproxy")
    port = _free_port()
    workdir = _workdir("haproxy")
    cfg = os.path.join(workdir, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write(_HAPROXY_CFG.format(port=port, upstream_port=upstream_port))
    # -db: stay in the foreground, so that stop() ends it.
    return _spawn("haproxy", [haproxy, "-db", "-f", cfg], workdir, port)


def _splice(upstream_port: int) -> Peer:
    workdir = _workdir("splice")
    try:
        done = c_build.compile_c(SPLICE_SOURCE, workdir)
    except c_build.NoCompiler as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        raise PeerSkipped(f"{exc}: the splice relay cannot be built") from None
    if done.binary is None:
        shutil.rmtree(workdir, ignore_errors=True)
        raise PeerSkipped(f"the splice relay did not compile: {done.first_error()}")
    return _spawn("splice", [done.binary, "0", str(upstream_port)], workdir, None)


_START = {"splice": _splice, "socat": _socat, "haproxy": _haproxy}

SPLICE_SOURCE = Path(__file__).with_name("splice_relay.c")
