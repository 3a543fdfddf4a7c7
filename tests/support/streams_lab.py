# SPDX-License-Identifier: Apache-2.0
"""What the streams tests run: a mock OpenAI/Anthropic server from PyPI
(llm-mock-api), a TLS gateway in front of it (socat, with a self-signed
certificate for 127.0.0.1), `zerolayer streams --json` collecting what it
reports, and the SDK clients of tests/support/stream_client.py. Every
process runs in a session of its own and is killed, with its children, on
every path."""

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

from support.cli_runner import ZEROLAYER

CLIENT = Path(__file__).resolve().parent / "stream_client.py"
MOCK = Path(sys.executable).parent / "llm-mock-api"
# The mock's answer: 50 characters in chunks of 5, so 10 chunks a stream.
REPLY = "Zebras quietly wander past seven violet lanterns.."
CHUNK_CHARS = 5
CHUNKS = len(REPLY) // CHUNK_CHARS


def emulated() -> bool:
    """A guest with a hypervisor but no kvm-clock: the VM rig under TCG,
    where one host thread runs every vCPU."""
    try:
        with open("/sys/devices/system/clocksource/clocksource0/available_clocksource") as f:
            clocks = f.read().split()
        with open("/proc/cpuinfo") as f:
            hypervisor = " hypervisor" in f.read()
    except OSError:
        return False
    return hypervisor and "kvm-clock" not in clocks


# The mock's pace. Under TCG an SDK takes longer than 20 ms to parse a chunk
# now and then: it falls behind, its reads coalesce (the kernel rightly sees
# gaps of 0) while its yields stay spread, and no gap can be compared.
LATENCY_MS = 60 if emulated() else 20
START_TIMEOUT_S = 300


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def stop(proc: subprocess.Popen) -> None:
    """Kill PROC's whole session (its forked children too) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


@contextlib.contextmanager
def exporter(*args: str):
    """`zerolayer exporter --streams` on a free port of loopback (or ARGS
    instead of --listen: a --config), as (its process, its /metrics URL);
    its session killed at the end (a test that wants a clean exit signals
    it first), its stderr left to read."""
    proc = subprocess.Popen([ZEROLAYER, "exporter", "--streams",
                             *(args or ("--listen", "127.0.0.1:0")), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line, f"the exporter did not start: {proc.stderr.read()}"
        yield proc, json.loads(line)["url"]
    finally:
        stop(proc)


@contextlib.contextmanager
def started(args: list[str], port: int, **kwargs):
    proc = subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, **kwargs)
    try:
        wait_port(port, proc)
        yield proc
    finally:
        stop(proc)


def mock_server(workdir: Path, port: int):
    """llm-mock-api on PORT, every answer REPLY in chunks LATENCY_MS apart."""
    return started([str(MOCK), "start", "--host", "127.0.0.1", "--port", str(port),
                    "--latency", str(LATENCY_MS), "--chunk-size", str(CHUNK_CHARS),
                    "--fallback", REPLY, "--log-level", "error"], port, cwd=workdir)


def mock_tls_server(workdir: Path, port: int, cert: Path, key: Path):
    """The same mock served with TLS by uvicorn itself (asyncio's TLS)."""
    return started([sys.executable, str(Path(__file__).resolve().parent / "mock_tls.py"),
                    str(port), str(cert), str(key), REPLY, str(CHUNK_CHARS), str(LATENCY_MS)],
                   port, cwd=workdir)


def certificate(workdir: Path) -> tuple[Path, Path]:
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def tls_gateway(port: int, upstream: int, cert: Path, key: Path):
    """socat terminating TLS on PORT (OpenSSL, linked dynamically) in front
    of UPSTREAM, a forked child per connection."""
    return started(["socat", f"OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,"
                    f"cert={cert},key={key},verify=0", f"TCP:127.0.0.1:{upstream}"], port)


class Observer:
    """`zerolayer streams --json ARGS`, its stdout lines parsed as they come."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([ZEROLAYER, "streams", "--json", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.streams: list[dict] = []
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.stderr_at: list[float] = []  # when each stderr line came (time.monotonic())
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()
        # The object is built once (cached), then loaded: a second or two
        # here, longer in the VM rig's TCG guests, longest on a first build.
        if not self._ready.wait(START_TIMEOUT_S):
            self.close()
            raise AssertionError(f"zerolayer streams did not start: {self.stderr}")

    def _read_out(self) -> None:
        for line in self.proc.stdout:
            with self._lock:
                self.stdout.append(line)
                self.streams.append(json.loads(line))

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self.stderr_at.append(time.monotonic())
            self.stderr.append(line)
            if "watching" in line:
                self._ready.set()
            if self.proc.poll() is not None:
                self._ready.set()
        self._ready.set()

    def wait_for(self, predicate, n: int, timeout: float = 15.0) -> list[dict]:
        """The reported streams that PREDICATE accepts, once there are N."""
        end = time.monotonic() + timeout
        while True:
            with self._lock:
                found = [s for s in self.streams if predicate(s)]
            if len(found) >= n or time.monotonic() > end:
                return found
            time.sleep(0.05)

    def summary(self, last: int = 12) -> list[tuple]:
        """Who and where the last LAST reported streams were, for a failure's message."""
        with self._lock:
            return [(s["side"], s["pid"], s["comm"], s["tls"], s["local"], s["remote"],
                     s["status"], s["chunks"]) for s in self.streams[-last:]]

    def interrupt(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> int:
        """SIG (SIGINT: Ctrl-C): its exit code once it has finished."""
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        for t in self._threads:
            t.join(5)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            stop(self.proc)
        for t in self._threads:
            t.join(5)


class OneChunkMissed(UserWarning):
    """Issue 30's open defect seen: a stream's record one chunk short."""


def chunks_match(record: dict, expected: int) -> bool:
    """RECORD counted EXPECTED chunks, or one short: the observer rarely
    misses one chunk of a stream (issue 30's open defect, cause not found;
    docs/benchmarks.md, "Token streams"). One short is let through with a
    warning that says what the record saw (its lost bytes tell a gap in the
    offsets from a silent miss), so every run that meets it says so;
    anything else fails."""
    counted = record["chunks"]
    if counted == expected - 1:
        warnings.warn(OneChunkMissed(
            f"{counted} of {expected} chunks (issue 30): {record['side']} side of "
            f"{record['comm']}, tls {record['tls']}, status {record['status']}, "
            f"{record['lost_bytes']} bytes lost, {record['events']} events"), stacklevel=2)
        return True
    return counted == expected


def run_client(api: str, base_url: str, prompt: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, str(CLIENT), api, base_url, prompt, *args],
                         capture_output=True, text=True, timeout=60, start_new_session=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def client_ttft_ms(stream: dict) -> float:
    return (stream["times"][0] - stream["t0"]) / 1e6


def gap_agrees(observed_p50_ms: float, stream: dict) -> bool:
    """The observer's median chunk gap against the client's: within 2 ms,
    or inside the client's middle half of gaps. Under TCG the SDK yields a
    chunk late by a varying amount, so the median of ten gaps can move more
    than 2 ms with every chunk seen at its read; a gap in the wrong unit,
    or a time that is not the chunk's, still fails."""
    t = stream["times"]
    gaps = [(b - a) / 1e6 for a, b in zip(t, t[1:])]
    if abs(observed_p50_ms - statistics.median(gaps)) <= 2.0:
        return True
    low, _, high = statistics.quantiles(gaps, n=4)
    return low <= observed_p50_ms <= high


def tracefs_mounted() -> bool:
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == TRACEFS for line in f)


TRACEFS = "/sys/kernel/tracing"


def held_probes(pid: int) -> tuple[set[int], int]:
    """The BPF programs (their ids) and perf events (each a tracepoint or
    uprobe attachment: libbpf and pyxdp.kernel.uprobe open them through
    perf_event_open, so they are not in tracefs's uprobe_events) that process PID holds."""
    progs, perf = set(), 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link == "anon_inode:[perf_event]":
                perf += 1
            elif link == "anon_inode:bpf-prog":
                with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                    progs |= {int(line.split()[1]) for line in info
                              if line.startswith("prog_id:")}
    return progs, perf


def prog_exists(prog_id: int) -> bool:
    from pyxdp.kernel import bpfsys

    try:
        os.close(bpfsys.prog_fd_by_id(prog_id))
    except OSError:
        return False
    return True


def programs_left(prog_ids, within_s: float = 5.0) -> list[int]:
    """Those of PROG_IDS the kernel still has after WITHIN_S: it frees a
    program a grace period after its last reference goes (a tracepoint's
    perf link is released through RCU), not at once at the holder's exit."""
    deadline = time.monotonic() + within_s
    while True:
        left = [p for p in prog_ids if prog_exists(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


class Client:
    """stream_client.py in the background, for a client that must exist
    before the observer starts or stay open while it stops: it waits for
    WAIT_FILE (a path in a test's directory) and pauses on PAUSE_FILE."""

    def __init__(self, api: str, base_url: str, prompt: str, *args: str):
        self.proc = subprocess.Popen([sys.executable, str(CLIENT), api, base_url, prompt, *args],
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.pid = self.proc.pid

    def wait_line(self, expected: str) -> None:
        line = self.proc.stdout.readline().strip()
        assert line == expected, f"client said {line!r}, not {expected!r}"

    def result(self) -> dict:
        out, _ = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0
        return json.loads(out.splitlines()[-1])

    def close(self) -> None:
        if self.proc.poll() is None:
            stop(self.proc)
