# SPDX-License-Identifier: Apache-2.0
"""`zerolayer streams` under the loads strangers bring (issue 43): more
connections than --max-streams, a socket shared across fork on both sides,
a flood that fills the ring, and one user naming 80 models. One stream is
one record, evicted streams never come back mid-way, a record with losses
says so, and nobody can use up root's model labels. Real processes on
loopback, the kernel's own probes (docs/spec.md §11.2.4, §11.2.5, §11.5)."""

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import hostile
from support import streams_lab as lab
from support.ports import free_port

pytestmark = pytest.mark.root

PEERS = str(Path(__file__).parent / "support" / "stream_peers.py")


def peers(*args, user=None, timeout: float = 180) -> dict:
    """stream_peers.py ARGS (as USER), what its clients read."""
    cmd = [sys.executable, PEERS, *map(str, args)]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
               *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def of_port(streams: list[dict], port: int) -> list[dict]:
    """The records of connections to PORT, either side."""
    want = f"127.0.0.1:{port}"
    return [s for s in streams if want in (s["local"] if s["side"] == "server" else s["remote"],)]


def finished(observer: lab.Observer) -> list[dict]:
    code = observer.interrupt()
    assert code == 0, observer.stderr
    text = "".join(observer.stderr)
    assert "Traceback" not in text and "internal error" not in text
    return observer.streams


def test_evicted_streams_never_come_back_as_streams():
    """2.7 times --max-streams streams open at once (the finding: 27,000
    pairs past the default 10,000, here 2,700 past 1,000 to stay in CI's
    time): each stream is reported done, whole, or evicted and counted, and
    none is reported again as a stream joined mid-way."""
    port, n, chunks = free_port(), 2700, 3
    observer = lab.Observer("--max-streams", "1000")
    try:
        seen = peers("many", port, n, chunks)
        assert seen == {"streams": n, "chunks": n * chunks}
        time.sleep(1.0)
    finally:
        streams = finished(observer)
    mine = of_port(streams, port)
    ended = [s for s in mine if s["status"] != "open"]
    assert ended, observer.stderr
    joined_mid_way = [s for s in mine if s["http_status"] is None]
    assert joined_mid_way == [], joined_mid_way[:3]
    for s in ended:
        assert (s["status"], s["chunks"], s["lost_bytes"]) == ("done", chunks, 0), s
        assert s["time_to_first_chunk_ms"] is not None
    summary = next(line for line in observer.stderr if "were evicted" in line)
    evicted = re.search(r"(\d+) streams were evicted .*\((\d+) client, (\d+) server\)", summary)
    assert evicted, summary
    total, client, server = map(int, evicted.groups())
    assert total == client + server > 0
    # every stream once: reported, or evicted (other processes' streams may be evicted too)
    assert len(mine) <= 2 * n
    assert len(mine) + total >= 2 * n
    by_side = {side: sum(s["side"] == side for s in mine) for side in ("client", "server")}
    assert by_side["client"] <= n and by_side["server"] <= n


def listening(port: int, timeout: float = 30.0) -> None:
    """Wait until something listens on 127.0.0.1:PORT, without connecting
    (the peers accept one connection)."""
    want = f":{port:04X} 00000000:0000 0A"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if want in Path("/proc/net/tcp").read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")


@pytest.mark.parametrize("side", ["server", "client"])
def test_a_fork_mid_stream_is_one_stream(side):
    """A server that forks mid-stream and exits, the child finishing; a
    client likewise: one record a side, done, with its time to first chunk;
    no cancelled parent and no headless child."""
    port, chunks = free_port(), 6
    observer = lab.Observer()
    try:
        if side == "server":
            forking = subprocess.Popen([sys.executable, PEERS, "fork-server", str(port),
                                        str(chunks)], stdout=subprocess.PIPE, text=True)
            listening(port)
            client = subprocess.run([sys.executable, "-c", _PLAIN_CLIENT, str(port)],
                                    capture_output=True, text=True, timeout=60)
            assert client.returncode == 0, client.stderr
            read = json.loads(client.stdout)
            forking.communicate(timeout=60)
        else:
            serving = subprocess.Popen([sys.executable, "-c", _PLAIN_SERVER, str(port),
                                        str(chunks)], text=True)
            listening(port)
            read = peers("fork-client", port, timeout=60)
            serving.communicate(timeout=60)
        assert read == {"streams": 1, "chunks": chunks}
        observer.wait_for(lambda s: s in of_port([s], port), 2, timeout=10)
        time.sleep(0.5)  # a third record, if one were made, would come now
    finally:
        streams = finished(observer)
    mine = of_port(streams, port)
    assert sorted((s["side"], s["status"], s["chunks"]) for s in mine) == [
        ("client", "done", chunks), ("server", "done", chunks)], mine
    assert all(s["time_to_first_chunk_ms"] is not None and s["lost_bytes"] == 0 for s in mine)


# A plain client and server for the other side of the fork tests.
_PLAIN_CLIENT = r"""
import json, socket, sys
sys.path.insert(0, %r)
import stream_peers as p
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
c.sendall(p.request())
data = b""
while not data.endswith(b"0\r\n\r\n"):
    more = c.recv(65536)
    if not more:
        break
    data += more
print(json.dumps({"streams": 1, "chunks": p.count_chunks(data)}))
""" % str(Path(__file__).parent / "support")

_PLAIN_SERVER = r"""
import socket, sys, time
sys.path.insert(0, %r)
import stream_peers as p
srv = socket.create_server(("127.0.0.1", int(sys.argv[1])))
conn, _ = srv.accept()
data = b""
while not data.endswith(p.BODY):
    data += conn.recv(65536)
conn.sendall(p.HEAD + p.chunk(0))
time.sleep(1.0)  # the client forks and its parent leaves meanwhile
for i in range(1, int(sys.argv[2])):
    conn.sendall(p.chunk(i))
    time.sleep(0.02)
conn.sendall(p.DONE)
time.sleep(0.3)
conn.close()
""" % str(Path(__file__).parent / "support")


def test_a_flood_says_what_it_lost():
    """300,000 events written as fast as loopback takes them: a side whose
    bytes the full ring lost is incomplete, with the bytes; a side counted
    whole is done with none lost; none claims more chunks than were sent."""
    port, events = free_port(), 300_000
    observer = lab.Observer()
    try:
        seen = peers("flood", port, events, timeout=300)
        assert seen == {"streams": 1, "chunks": events}
        observer.wait_for(lambda s: s in of_port([s], port), 2, timeout=30)
    finally:
        streams = finished(observer)
    mine = of_port(streams, port)
    assert sorted(s["side"] for s in mine) == ["client", "server"], mine
    for s in mine:
        assert s["chunks"] <= events
        if s["chunks"] < events or s["lost_bytes"]:
            assert s["status"] == "incomplete" and s["lost_bytes"] > 0, s
        else:
            assert s["status"] == "done", s
    if any(s["status"] == "incomplete" for s in mine):
        assert any("never reached the observer" in line for line in observer.stderr)


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=20) as answer:
        return answer.read().decode()


def _models(text: str) -> set[str]:
    return {s.labels["model"] for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "zerolayer_stream_time_per_output_chunk_seconds_count"}


def test_one_user_cannot_use_up_roots_model_labels():
    """An ordinary user's processes name 80 models; root's stream after them
    keeps its own model label, and the scrape stays within the bound."""
    from pyxdp.streams import metrics

    with lab.exporter() as (_proc, url):
        with hostile.ordinary_user() as user:
            assert peers("models", free_port(), 80, "zl-user-model", user=user) == {
                "streams": 80, "chunks": 160}
        assert peers("models", free_port(), 1, "zl-root-model") == {"streams": 1, "chunks": 2}
        end = time.monotonic() + 15
        while "zl-root-model-0" not in _models(text := _scrape(url)) and time.monotonic() < end:
            time.sleep(0.2)
        models = _models(text)
        assert "zl-root-model-0" in models, sorted(models)
        assert len({m for m in models if m.startswith("zl-user-model")}) <= \
            metrics.MODELS_PER_OWNER
        assert len(models) <= metrics.MAX_MODEL_VALUES
        assert shutil.which("promtool"), "promtool is not installed: run vagrant/provision.sh"
        promtool = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                                  capture_output=True)
        assert promtool.returncode == 0, promtool.stdout + promtool.stderr
