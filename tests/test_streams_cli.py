# SPDX-License-Identifier: Apache-2.0
"""`zerolayer streams` options: bad values refused in one line; --pid
watching one process alone (its TLS through uprobes placed in it only);
streams still open when SIGTERM ends it reported as open; the table."""

import signal
import subprocess

import pytest

from support import streams_lab as lab
from support.cli_runner import run_cli
from support.ports import free_port, free_ports


@pytest.mark.parametrize("args", [["--pid", "0"], ["--pid", "not-a-pid"], ["--count", "0"],
                                  ["--stall-ms", "0"], ["--duration", "0"],
                                  ["--max-streams", "0"]])
def test_bad_values_are_usage_errors(args):
    proc = run_cli("streams", *args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.root
def test_one_pid_and_the_streams_open_at_exit(tmp_path):
    """Two clients stream; the observer watches one (TLS, paused mid-stream
    when the observer is stopped): one record, that client's, open."""
    cert, key = lab.certificate(tmp_path)
    mock_port, tls_port = free_ports(2)
    go, resume = tmp_path / "go", tmp_path / "resume"
    secret = f"zl-private-{tmp_path.name}"
    with lab.mock_server(tmp_path, mock_port), lab.tls_gateway(tls_port, mock_port, cert, key):
        watched = lab.Client("openai", f"https://127.0.0.1:{tls_port}", secret, "--cafile",
                             str(cert), "--wait-file", str(go), "--pause-after", "3",
                             "--pause-file", str(resume))
        other = lab.Client("anthropic", f"http://127.0.0.1:{mock_port}", secret,
                           "--wait-file", str(go))
        observer = None
        try:
            watched.wait_line("ready")
            other.wait_line("ready")
            observer = lab.Observer("--pid", str(watched.pid))
            go.touch()
            watched.wait_line("paused")
            progs, perf_events = lab.held_probes(observer.proc.pid)
            assert perf_events == 18 + 8  # the tracepoints, the uprobes in one process
            assert other.result()["streams"][0]["status"] == "done"
            assert observer.interrupt(signal.SIGTERM) == 0
            resume.touch()
            assert watched.result()["streams"][0]["times"][:3]
        finally:
            resume.touch()
            watched.close()
            other.close()
            if observer:
                observer.close()
    [seen] = observer.streams
    assert (seen["pid"], seen["side"], seen["tls"], seen["status"], seen["chunks"]) == (
        watched.pid, "client", True, "open", 3)
    assert secret not in "".join(observer.stdout + observer.stderr)
    assert not lab.programs_left(progs)


@pytest.mark.root
def test_the_table(tmp_path):
    """Without --json, at the end (no terminal): the stream's row, the
    counters and what cannot be seen."""
    port = free_port()
    with lab.mock_server(tmp_path, port):
        observer = subprocess.Popen([lab.ZEROLAYER, "streams", "--count", "1"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            while "watching" not in observer.stderr.readline():
                assert observer.poll() is None
            curl = subprocess.Popen(["curl", "-sN", "-o", "/dev/null", "-H",
                                     "content-type: application/json", "-d",
                                     '{"model":"m-1","stream":true,"messages":[]}',
                                     f"http://127.0.0.1:{port}/v1/chat/completions"])
            assert curl.wait(30) == 0
            out, _ = observer.communicate(timeout=60)
        finally:
            lab.stop(observer)
    assert observer.returncode == 0
    head, *rows = out.split("\n\n")[0].splitlines()
    assert head.split()[:4] == ["PID", "COMM", "SIDE", "TLS"]
    # the stream that ended (one side of the pair, the other maybe open)
    assert any("m-1" in r and f" {lab.CHUNKS} " in r and r.endswith("done") for r in rows)
    assert "not seen:" in out
