# SPDX-License-Identifier: Apache-2.0
"""pyxdp.streams.metrics (docs/spec.md §11): the Prometheus histograms and
counters the tracker feeds as chunks pass, their bounded model label, and
the text exposition (checked by prometheus_client's parser, and by promtool
where it is installed: Debian's prometheus package ships it)."""

import os
import shutil
import subprocess
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pyxdp.streams.metrics import GAP_BUCKETS, StreamMetrics
from pyxdp.streams.tracker import StreamTracker
from support.sse_bytes import MS, anthropic_events, openai_events, request, stream


def families(m: StreamMetrics) -> dict:
    return {f.name: f for f in text_string_to_metric_families(m.render().decode())}


def samples(fam, suffix="", **labels):
    return [s for s in fam.samples if s.name == fam.name + suffix
            and all(s.labels.get(k) == v for k, v in labels.items())]


def test_histograms_and_counters_from_streams():
    tr = StreamTracker(stall_ms=15)
    m = StreamMetrics(counters=lambda: tr.counters)
    tr.metrics = m
    stream(tr, (1, 1), openai_events(("a", "b", "c"), model="gpt-4o", usage=3), step=10 * MS)
    stream(tr, (2, 1), anthropic_events(("x", "y"), model="claude-x", output_tokens=2),
           step=20 * MS, side="server", req=request(path=b"/v1/messages"))
    tr.describe((2, 1), pid=2, tls=True)
    f = families(m)
    ttft = f["zerolayer_stream_time_to_first_chunk_seconds"]
    (count,) = samples(ttft, "_count", side="client", api="openai", tls="false", model="gpt-4o")
    assert count.value == 1
    gaps = f["zerolayer_stream_time_per_output_chunk_seconds"]
    (c_gaps,) = samples(gaps, "_count", side="client", model="gpt-4o")
    (s_gaps,) = samples(gaps, "_count", side="server", api="anthropic", model="claude-x")
    assert (c_gaps.value, s_gaps.value) == (2, 1)
    (le,) = samples(gaps, "_bucket", side="client", le="0.01")
    assert le.value == 2  # 10 ms gaps fall in le=0.01
    assert len(samples(gaps, "_bucket", side="client")) == len(GAP_BUCKETS) + 1
    streams = f["zerolayer_streams"]
    assert {(s.labels["side"], s.labels["status"]) for s in streams.samples
            if s.name == "zerolayer_streams_total"} == {("client", "done"), ("server", "done")}
    chunks = {s.labels["side"]: s.value for s in f["zerolayer_stream_chunks"].samples
              if s.name.endswith("_total")}
    assert chunks == {"client": 3, "server": 2}
    tokens = {s.labels["model"]: s.value for s in f["zerolayer_stream_tokens"].samples
              if s.name.endswith("_total")}
    assert tokens == {"gpt-4o": 3, "claude-x": 2}
    stalls = [s for s in f["zerolayer_stream_stalls"].samples if s.name.endswith("_total")]
    assert [s.labels["side"] for s in stalls] == ["server"]  # 20 ms > 15 ms
    assert f["zerolayer_streams_open"].samples[0].value == 0


def test_model_label_is_bounded():
    tr = StreamTracker()
    m = StreamMetrics(models_per_owner=5)
    tr.metrics = m
    for i in range(12):
        stream(tr, (i, 1), openai_events(("a", "b"), model=f"model-{i}"))
    stream(tr, (99, 1), [b"data: tick\n\n", b"data: tock\n\n"],
           req=b"GET /e HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n")
    models = {s.labels["model"] for s in
              families(m)["zerolayer_stream_time_per_output_chunk_seconds"].samples}
    assert models == {f"model-{i}" for i in range(5)} | {"other", "unknown"}


def test_one_user_cannot_use_up_the_model_labels():
    """80 model names from one uid fill that uid's budget only: root's model,
    and another service's, keep their own series (docs/spec.md §11.5)."""
    from pyxdp.streams import metrics as metrics_mod

    tr = StreamTracker()
    m = StreamMetrics()
    tr.metrics = m
    for i in range(80):
        tr.describe((1000 + i, 1), pid=1000 + i, uid=1001)
        stream(tr, (1000 + i, 1), openai_events(("a", "b"), model=f"user-model-{i}"))
    tr.describe((1, 1), pid=1, uid=0)
    stream(tr, (1, 1), openai_events(("a", "b"), model="root-model"))
    tr.describe((2, 1), pid=2, uid=998)
    stream(tr, (2, 1), openai_events(("a", "b"), model="service-model"))
    models = {s.labels["model"] for s in
              families(m)["zerolayer_stream_time_per_output_chunk_seconds"].samples}
    assert {"root-model", "service-model", "other"} <= models
    assert len(models - {"root-model", "service-model", "other"}) == metrics_mod.MODELS_PER_OWNER
    # many uids (a user's subordinate uids) still cannot reach root's budget
    for uid in range(200000, 200000 + 3 * metrics_mod.OWN_BUDGETS):
        for j in range(metrics_mod.MODELS_PER_OWNER + 1):
            pid = uid * 100 + j
            tr.describe((pid, 1), pid=pid, uid=uid)
            stream(tr, (pid, 1), openai_events(("a", "b"), model=f"m-{uid}-{j}"))
    tr.describe((3, 1), pid=3, uid=0)
    stream(tr, (3, 1), openai_events(("a", "b"), model="root-model-2"))
    models = {s.labels["model"] for s in
              families(m)["zerolayer_stream_time_per_output_chunk_seconds"].samples}
    assert "root-model-2" in models
    assert len(models) <= metrics_mod.MAX_MODEL_VALUES


def test_exposition_is_promtool_clean():
    tr = StreamTracker()
    m = StreamMetrics(counters=lambda: tr.counters)
    tr.metrics = m
    stream(tr, (1, 1), openai_events(("a", "b", "c"), usage=3))
    text = m.render()
    assert len(families(m)) >= 8
    promtool = shutil.which("promtool") or os.environ.get("PROMTOOL")
    if not promtool:
        # Provisioning unpacks it (vagrant/provision.sh): CI must not pass without it.
        assert not os.environ.get("CI"), "promtool is not installed: run vagrant/provision.sh"
        pytest.skip("promtool is not installed (vagrant/provision.sh unpacks it)")
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_feeding_and_scraping_from_two_threads():
    tr = StreamTracker()
    m = StreamMetrics(counters=lambda: tr.counters)
    tr.metrics = m
    stop = threading.Event()
    scrapes = []

    def scrape():
        while not stop.is_set():
            scrapes.append(len(m.render()))

    t = threading.Thread(target=scrape)
    t.start()
    try:
        for i in range(200):
            stream(tr, (i, 1), openai_events(("a", "b", "c")), step=MS)
    finally:
        stop.set()
        t.join()
    assert scrapes
    f = families(m)
    assert sum(s.value for s in f["zerolayer_stream_chunks"].samples
               if s.name.endswith("_total")) == 600
