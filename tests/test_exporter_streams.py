# SPDX-License-Identifier: Apache-2.0
"""`zerolayer exporter --streams`: the token streams' histograms, fed by
real SDK clients streaming from a mock server from PyPI, served beside the
XDP metrics, promtool-clean, and holding no byte of any prompt or reply."""

import json
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
    proc = subprocess.Popen([ZEROLAYER, "exporter", "--streams", "--listen", "127.0.0.1:0",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line, f"the exporter did not start: {proc.stderr.read()}"
        progs, perf_events = lab.held_probes(proc.pid)
        assert progs and perf_events, "the exporter holds no probe"
        yield json.loads(line)["url"]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "internal error" not in err
        assert not any(lab.prog_exists(p) for p in progs), "a probe outlived the exporter"
        assert lab.tracefs_mounted() == tracefs_before
    finally:
        lab.stop(proc)


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
