# SPDX-License-Identifier: Apache-2.0
"""`zerolayer streams` and HTTP/2 between real peers: HAProxy from Debian
serving TLS with ALPN h2 (and h2c with prior knowledge) in front of the
paced mock server from PyPI (llm-mock-api), curl over HTTP/2 and HTTP/1.1
through it, and a gRPC server-stream between grpcio's server and client.
Each record is held to what its client received: the chunks counted in
curl's own output, or the messages grpcio's client got, exactly (one
short let through with a warning: issue 30), the status as it ended; and
both sides of the proxy are reported, its TLS side in HTTP/2 and its
plaintext hop to the mock in HTTP/1.1. The prompt is nowhere in what the
observer prints."""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from support import streams_lab as lab
from support.ports import free_ports

pytestmark = pytest.mark.root

GRPC_PEER = Path(__file__).resolve().parent / "support" / "grpc_peer.py"
GRPC_GAP_MS = lab.LATENCY_MS


def haproxy_config(workdir: Path, tls_port: int, h2c_port: int, upstream: int, pem: Path) -> Path:
    """TLS with ALPN h2 and http/1.1 on TLS_PORT, h2c (prior knowledge) on
    H2C_PORT, both in front of UPSTREAM in HTTP/1.1, a new upstream
    connection per request (so each hop's record pairs with one stream)."""
    path = workdir / "haproxy.cfg"
    path.write_text(f"""global
    nbthread 1
defaults
    mode http
    option http-server-close
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend tls
    bind 127.0.0.1:{tls_port} ssl crt {pem} alpn h2,http/1.1
    default_backend mock
frontend h2c
    bind 127.0.0.1:{h2c_port} proto h2
    default_backend mock
backend mock
    server mock 127.0.0.1:{upstream}
""")
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("streams-h2")
    cert, key = lab.certificate(workdir)
    pem = workdir / "haproxy.pem"
    pem.write_bytes(cert.read_bytes() + key.read_bytes())
    mock_port, tls_port, h2c_port, grpc_port = free_ports(4)
    config = haproxy_config(workdir, tls_port, h2c_port, mock_port, pem)
    with lab.mock_server(workdir, mock_port) as mock, \
            lab.started(["haproxy", "-db", "-f", str(config)], tls_port) as proxy, \
            lab.started([sys.executable, str(GRPC_PEER), "server", str(grpc_port),
                         str(GRPC_GAP_MS)], grpc_port) as grpc_server:
        lab.wait_port(h2c_port, proxy)
        observer = lab.Observer()
        try:
            yield {"workdir": workdir, "tls": f"https://127.0.0.1:{tls_port}", "h2c": f"http://127.0.0.1:{h2c_port}",
                   "grpc_port": grpc_port, "cafile": str(cert), "mock": mock, "proxy": proxy,
                   "grpc_server": grpc_server, "observer": observer, "prompts": []}
        finally:
            observer.close()


def prompt(setup) -> str:
    text = f"zl-private-prompt-{uuid.uuid4().hex}"
    setup["prompts"].append(text)
    return text


def chat_body(setup) -> str:
    return json.dumps({"model": "gpt-test", "stream": True,
                       "messages": [{"role": "user", "content": prompt(setup)}]})


def chunks_received(output: str) -> int:
    """The chunks in curl's output, counted by this test: events whose
    first choice's delta carries content."""
    n = 0
    for line in output.splitlines():
        if line.startswith("data: {"):
            choices = json.loads(line[6:]).get("choices") or [{}]
            n += bool(choices[0].get("delta", {}).get("content"))
    return n


def curl(setup, *args: str, urls: int = 1, base: str = "tls") -> tuple[int, list[int]]:
    """curl ARGS streaming URLS chat completions (multiplexed on one
    connection with -Z, when more than one), each into a file of its own:
    its pid and, per stream, the chunks it received."""
    url = setup[base] + "/v1/chat/completions"
    outputs = [setup["workdir"] / f"curl-{uuid.uuid4().hex}.out" for _ in range(urls)]
    argv = ["curl"]
    for i, path in enumerate(outputs):
        argv += [*(["--next"] if i else []), "-sN", "--cacert", setup["cafile"], *args,
                 "-H", "content-type: application/json", "-d", chat_body(setup), "-o", str(path),
                 url]
    proc = subprocess.Popen(argv)
    assert proc.wait(30) == 0
    texts = [path.read_text() for path in outputs]
    for path in outputs:
        path.unlink()
    assert all(t.count("[DONE]") == 1 for t in texts), [t[-300:] for t in texts]
    return proc.pid, [chunks_received(t) for t in texts]


def records_of(setup, predicate, n: int) -> list[dict]:
    found = setup["observer"].wait_for(predicate, n)
    assert len(found) == n, f"{len(found)} records, expected {n}: {setup['observer'].summary()}"
    return found


def one_hop(setup, client: dict, http: str, tls: bool, received: int) -> None:
    """The proxy's records of the stream CLIENT's record saw: its server
    side facing the client (HTTP version HTTP, TLS or not), its plaintext
    HTTP/1.1 client side to the mock, and the mock's server side; each with
    RECEIVED chunks, done."""
    proxy = setup["proxy"].pid
    [front] = records_of(setup, lambda s: s["side"] == "server" and s["pid"] == proxy
                         and s["remote"] == client["local"] and s["started_ns"] >=
                         client["started_ns"] - 1e9, 1)
    assert (front["comm"], front["http"], front["tls"], front["status"], front["http_status"]) \
        == ("haproxy", http, tls, "done", 200)
    assert lab.chunks_match(front, received) and front["model"] == "gpt-test"
    end = front["started_ns"] + front["duration_ms"] * 1e6
    ups = records_of(setup, lambda s: s["side"] == "client" and s["pid"] == proxy
                     and front["started_ns"] <= s["started_ns"] <= end, 1)
    [up] = ups
    assert (up["http"], up["tls"], up["status"]) == ("1.1", False, "done")
    assert lab.chunks_match(up, received)
    [mock] = records_of(setup, lambda s: s["side"] == "server" and s["remote"] == up["local"]
                        and s["pid"] == setup["mock"].pid and front["started_ns"] <= s["started_ns"]
                        <= end, 1)
    assert mock["http"] == "1.1" and lab.chunks_match(mock, received)


def judge_client(record: dict, http: str, tls: bool, received: int) -> None:
    assert (record["comm"], record["side"], record["http"], record["tls"]) == \
        ("curl", "client", http, tls)
    assert (record["status"], record["end"], record["http_status"]) == ("done", "api", 200)
    assert (record["api"], record["model"], record["operation"]) == ("openai", "gpt-test", "chat")
    assert lab.chunks_match(record, received)
    assert record["time_to_first_chunk_ms"] is not None and record["chunk_gap_ms"] is not None


@pytest.mark.parametrize(("flag", "http"), [("--http2", "2"), ("--http1.1", "1.1")])
def test_curl_through_a_tls_proxy(setup, flag, http):
    pid, [received] = curl(setup, flag)
    assert received == lab.CHUNKS
    [record] = records_of(setup, lambda s: s["pid"] == pid, 1)
    judge_client(record, http, True, received)
    one_hop(setup, record, http, True, received)


def test_h2c_with_prior_knowledge(setup):
    pid, [received] = curl(setup, "--http2-prior-knowledge", base="h2c")
    [record] = records_of(setup, lambda s: s["pid"] == pid, 1)
    judge_client(record, "2", False, received)
    one_hop(setup, record, "2", False, received)


def test_two_streams_multiplexed_on_one_connection(setup):
    """curl -Z: two streams at once on one HTTP/2 connection, a record each."""
    pid, received = curl(setup, "--http2", "-Z", urls=2)
    records = records_of(setup, lambda s: s["pid"] == pid, 2)
    assert records[0]["local"] == records[1]["local"]  # one connection
    assert received == [lab.CHUNKS, lab.CHUNKS]  # (which record is whose is not told apart)
    for record in records:
        judge_client(record, "2", True, lab.CHUNKS)
    fronts = records_of(setup, lambda s: s["pid"] == setup["proxy"].pid and s["side"] == "server"
                        and s["remote"] == records[0]["local"], 2)
    assert all(s["http"] == "2" and s["status"] == "done" for s in fronts)
    assert sorted(s["chunks"] for s in fronts) == sorted(s["chunks"] for s in records)


def grpc_call(setup, n: int, fail: int = -1) -> dict:
    out = subprocess.run([sys.executable, str(GRPC_PEER), "client", str(setup["grpc_port"]),
                          str(n), str(fail), prompt(setup)], capture_output=True, text=True,
                         timeout=60, start_new_session=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize(("fail", "status"), [(-1, "done"), (4, "error")])
def test_grpc_server_streaming(setup, fail, status):
    """grpcio's client and server, h2c: each message a chunk on both sides,
    the status from grpc-status (ABORTED: error)."""
    got = grpc_call(setup, 12, fail)
    assert (got["messages"], got["status"]) == ((12, "OK") if fail < 0 else (fail, "ABORTED"))
    [client] = records_of(setup, lambda s: s["pid"] == got["pid"], 1)
    [server] = records_of(setup, lambda s: s["pid"] == setup["grpc_server"].pid
                          and s["remote"] == client["local"], 1)
    for record, side in ((client, "client"), (server, "server")):
        assert (record["side"], record["api"], record["http"], record["tls"]) == \
            (side, "grpc", "2", False)
        assert (record["grpc_method"], record["status"], record["http_status"]) == \
            ("/zl.Tokens/Stream", status, 200)
        assert record["chunks"] == got["messages"]
        assert record["time_to_first_chunk_ms"] is not None
        if got["messages"] >= 5:
            assert lab.gap_agrees(record["chunk_gap_ms"]["p50"], got), (record, got["times"])


def test_zz_ends_cleanly_and_says_nothing_private(setup):
    observer = setup["observer"]
    assert observer.interrupt() == 0
    text = "".join(observer.stdout) + "".join(observer.stderr)
    for secret in setup["prompts"] + [lab.REPLY[:20], lab.REPLY[20:40], "token-00"]:
        assert secret not in text
    footer = observer.stderr[0].split("not seen:")[1]
    assert "gRPC" not in footer and "HTTP/2 connections older than the observer" in footer
