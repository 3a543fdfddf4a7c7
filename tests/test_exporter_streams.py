# SPDX-License-Identifier: Apache-2.0
"""`zerolayer exporter --streams`: the token streams' histograms, fed by
real SDK clients streaming from a mock server from PyPI, served beside the
XDP metrics, promtool-clean, and holding no byte of any prompt or reply."""

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import streams_lab as lab
from support.cli_runner import ZEROLAYER
from support.ports import free_port

pytestmark = pytest.mark.root


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=20) as answer:
        assert answer.status == 200
        return answer.read().decode()


def samples(text: str, name: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name]


def total(text: str, name: str, **labels: str) -> float:
    return sum(s.value for s in samples(text, name)
               if all(s.labels.get(k) == v for k, v in labels.items()))


def added(before: str, after: str, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


@pytest.fixture
def exporter():
    """The exporter with --streams on a free port; SIGTERM at the end must
    leave it exit 0, its probes removed."""
    tracefs_before = lab.tracefs_mounted()
    with lab.exporter() as (proc, url):
        progs, perf_events = lab.held_probes(proc.pid)
        assert progs and perf_events, "the exporter holds no probe"
        yield url
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "internal error" not in err
        assert not lab.programs_left(progs), "a probe outlived the exporter"
        assert lab.tracefs_mounted() == tracefs_before


def test_exporter_streams_serves_both_histograms(exporter, tmp_path):
    port = free_port()
    prompt = f"zl-private-prompt-{uuid.uuid4().hex}"
    # Every process's streams are counted: the test's are what it adds.
    before = scrape(exporter)
    with lab.mock_server(tmp_path, port):
        for api in ("openai", "anthropic"):
            lab.run_client(api, f"http://127.0.0.1:{port}", prompt)
        # Both sides of both streams, once the observer has read them.
        end = time.monotonic() + 15
        while True:
            text = scrape(exporter)
            done = added(before, text, "zerolayer_streams_total", status="done")
            if done >= 4 or time.monotonic() > end:
                break
            time.sleep(0.2)
    for api in ("openai", "anthropic"):
        for side in ("client", "server"):
            ttft = added(before, text, "zerolayer_stream_time_to_first_chunk_seconds_count",
                         api=api, side=side, tls="false")
            gaps = added(before, text, "zerolayer_stream_time_per_output_chunk_seconds_count",
                         api=api, side=side, tls="false")
            assert ttft == 1, (api, side, ttft)
            assert gaps == lab.CHUNKS - 1, (api, side, gaps)
    assert added(before, text, "zerolayer_streams_total", status="done") == 4
    assert total(text, "zerolayer_attached") >= 0  # the XDP metrics are still served
    promtool = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                              capture_output=True)
    assert promtool.returncode == 0, promtool.stdout + promtool.stderr
    assert prompt not in text and lab.REPLY[:10] not in text


def test_exporter_streams_refuses_once():
    done = subprocess.run([ZEROLAYER, "exporter", "--streams", "--once"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert "--once" in done.stderr and "Traceback" not in done.stderr


def test_streams_table_in_a_configuration(tmp_path):
    """[streams] is part of the file apply and the exporter read: a wrong
    value is FILE:LINE, exit 2."""
    path = tmp_path / "zerolayer.toml"
    path.write_text("[streams]\nenabled = true\nstall_ms = 0\n")
    os.chmod(path, 0o600)
    done = subprocess.run([ZEROLAYER, "exporter", "--config", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert f"{path}:3: streams.stall_ms" in done.stderr, done.stderr


# --- the watchdog: a real stall of the observer's thread ---------------------------

PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207
WALL = 0x40000000  # waitpid's __WALL: a thread of another process


class ThreadStopped:
    """One thread of another process held in a ptrace stop (the others run
    on), so the observer really stands still while its HTTP server answers."""

    def __init__(self, tid: int) -> None:
        import ctypes

        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p,
                                      ctypes.c_void_p]
        self.tid = tid
        self._call(PTRACE_SEIZE)
        self._call(PTRACE_INTERRUPT)
        os.waitpid(tid, WALL)  # it is stopped once this returns

    def _call(self, request: int) -> None:
        import ctypes

        if self._libc.ptrace(request, self.tid, None, None) != 0:
            raise OSError(ctypes.get_errno(), f"ptrace {request:#x} of thread {self.tid}")

    def resume(self) -> None:
        self._call(PTRACE_DETACH)


def _observer_tid(pid: int) -> int:
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/comm") as f:
            if f.read().strip() == "zl-streams":
                return int(task)
    raise AssertionError(f"no thread named zl-streams in {os.listdir(f'/proc/{pid}/task')}")


def _health(url: str, timeout: float = 20) -> tuple[float, float, float]:
    """(stale, heartbeat age, server streams done) of one scrape."""
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        text = answer.read().decode()
    return (total(text, "zerolayer_streams_stale"),
            total(text, "zerolayer_stream_observer_heartbeat_age_seconds"),
            total(text, "zerolayer_streams_total", side="server", status="done"))


@contextlib.contextmanager
def observer_stopped(pid: int, url: str):
    """The observer's thread of exporter PID in a ptrace stop, resumed at
    the end however the test ends. Stopped where it holds the GIL, the
    whole process would stand still (not the case to test): it is stopped
    again until a scrape of URL still answers."""
    tid = _observer_tid(pid)
    for _ in range(5):
        stopped = ThreadStopped(tid)
        try:
            _health(url, timeout=3)
            break
        except OSError:
            stopped.resume()
            time.sleep(0.2)
    else:
        raise AssertionError("the observer's thread could not be stopped outside the GIL")
    try:
        yield
    finally:
        stopped.resume()


def test_a_stalled_observer_is_logged_and_scraped_stale(tmp_path):
    """The observer's thread stopped for 8 s while a stream runs: one log
    line says so and what it was doing; every scrape answers, stale 1 with
    the heartbeat's age, the stream not yet counted. Resumed: one line says
    for how long, stale 0, and the stream is counted from what the ring kept."""
    with lab.exporter() as (proc, url):
        stale, age, done_before = _health(url)
        assert stale == 0 and age < 1, (stale, age)
        with observer_stopped(proc.pid, url):
            held_at = time.monotonic()
            port = free_port()
            with lab.mock_server(tmp_path, port):
                lab.run_client("openai", f"http://127.0.0.1:{port}", "zl-during-the-stall")
            time.sleep(max(0.0, held_at + 8 - time.monotonic()))
            stale, age, done = _health(url)
            assert stale == 1 and age >= 7, (stale, age)
            assert done == done_before  # the stream waits in the ring
        end = time.monotonic() + 15
        while (health := _health(url))[2] < done_before + 1 and time.monotonic() < end:
            time.sleep(0.2)
        stale, age, done = health
        assert done == done_before + 1 and stale == 0 and age < 1, health
        time.sleep(1.5)  # the watchdog's next check says it runs again
    err = proc.stderr.read()
    stalls = [x for x in err.splitlines() if "has not come round its loop" in x]
    again = [x for x in err.splitlines() if "runs again after standing still" in x]
    assert len(stalls) == 1 and "(it was reading its ring)" in stalls[0], err
    assert len(again) == 1, err
    stood = float(again[0].split("standing still for ")[1].split(" s")[0])
    assert 7 <= stood <= 20, again
    assert "Traceback" not in err


def test_the_configurations_selection_counts_only_that_port(tmp_path):
    """[streams] ports = [PORT]: the mock serving PORT is counted, the one
    on another port is not, and the exporter says what it selected."""
    from support.ports import free_ports

    chosen, other, listen = free_ports(3)
    conf = tmp_path / "zerolayer.toml"
    conf.write_text(f'[exporter]\nport = {listen}\n\n[streams]\nenabled = true\n'
                    f'ports = [{chosen}]\n')
    prompt = f"zl-private-prompt-{uuid.uuid4().hex}"
    with lab.mock_server(tmp_path, chosen), lab.mock_server(tmp_path, other), \
            lab.exporter("--config", str(conf)) as (proc, url):
        before = scrape(url)
        lab.run_client("openai", f"http://127.0.0.1:{chosen}", prompt)
        lab.run_client("openai", f"http://127.0.0.1:{other}", prompt)
        end = time.monotonic() + 15
        while total(scrape(url), "zerolayer_streams_total", side="server") < 1 \
                and time.monotonic() < end:
            time.sleep(0.2)
        time.sleep(3)  # anything late comes in
        after = scrape(url)
        assert added(before, after, "zerolayer_streams_total", side="server", status="done") == 1
        # the client on CHOSEN is taken only if a scan saw its socket: at most one more
        assert added(before, after, "zerolayer_streams_total") <= 2
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert f"observing token streams of the processes of port {chosen}" in err
