# SPDX-License-Identifier: Apache-2.0
"""`zerolayer streams` against real clients and servers: the openai and
anthropic SDKs and curl, a mock OpenAI/Anthropic server from PyPI
(llm-mock-api) and a TLS gateway in front of it (socat, OpenSSL). Each
client records when its SDK yields each chunk; the observer's report of
every stream, on both sides, is held to it: the chunk count (one short
let through with a warning: issue 30), the median gap (lab.gap_agrees),
the time to first chunk no later than the client's, the status as the
client ended it. The prompt is nowhere in what
the observer prints."""

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pyxdp.streams import elf_symbols
from pyxdp.streams.watch import SCAN_EVERY_S
from support import streams_lab as lab
from support.ports import free_ports

pytestmark = pytest.mark.root

NODE_CLIENT = Path(__file__).resolve().parent / "support" / "node_stream_client.js"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("streams")
    cert, key = lab.certificate(workdir)
    mock_port, tls_port, uvicorn_port = free_ports(3)
    tracefs_before = lab.tracefs_mounted()
    with lab.mock_server(workdir, mock_port) as mock, \
            lab.tls_gateway(tls_port, mock_port, cert, key) as gateway, \
            lab.mock_tls_server(workdir, uvicorn_port, cert, key) as uvicorn:
        observer = lab.Observer()
        try:
            yield {"plain": f"http://127.0.0.1:{mock_port}", "tls": f"https://127.0.0.1:{tls_port}",
                   "uvicorn": f"https://127.0.0.1:{uvicorn_port}", "cafile": str(cert),
                   "mock": mock, "gateway": gateway, "tls_mock": uvicorn, "observer": observer,
                   "tracefs": tracefs_before, "prompts": []}
        finally:
            observer.close()


def prompt(setup) -> str:
    text = f"zl-private-prompt-{uuid.uuid4().hex}"
    setup["prompts"].append(text)
    return text


def judge(seen: dict, client: dict, tls: bool) -> None:
    """The observer's client-side record SEEN of one stream against what
    the SDK yielded (CLIENT)."""
    assert seen["side"] == "client"
    assert seen["tls"] is tls
    assert lab.chunks_match(seen, len(client["times"]))
    assert seen["status"] == client["status"]
    assert seen["time_to_first_chunk_ms"] <= lab.client_ttft_ms(client)
    # a median of a few gaps moves with the SDK's slower first yield
    if len(client["times"]) >= 5:
        assert lab.gap_agrees(seen["chunk_gap_ms"]["p50"], client)


def server_of(observer, seen: dict, status: str, tls: bool) -> dict:
    """The server side's record of the stream whose client side is SEEN."""
    found = observer.wait_for(lambda s: s["side"] == "server" and s["remote"] == seen["local"], 1)
    assert len(found) == 1, f"no server side for {seen['local']} among {observer.summary()}"
    server = found[0]
    assert server["status"] == status
    assert server["tls"] is tls
    assert server["api"] == seen["api"] and server["model"] == seen["model"]
    assert server["time_to_first_chunk_ms"] is not None
    return server


def client_streams(observer, pid: int, n: int) -> list[dict]:
    found = observer.wait_for(lambda s: s["pid"] == pid, n)
    assert len(found) == n, f"{len(found)} streams of pid {pid}, expected {n}"
    return sorted(found, key=lambda s: s["started_ns"])


@pytest.mark.kernel
@pytest.mark.smoke
@pytest.mark.capability("streams")
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_plaintext_sdk_streams(setup, api, record_property):
    record_property("seen", "plaintext (tracepoints)")
    out = lab.run_client(api, setup["plain"], prompt(setup))
    [seen] = client_streams(setup["observer"], out["pid"], 1)
    judge(seen, out["streams"][0], tls=False)
    assert seen["api"] == api and lab.chunks_match(seen, lab.CHUNKS)
    assert seen["model"] == ("gpt-test" if api == "openai" else "claude-test")
    server = server_of(setup["observer"], seen, "done", tls=False)
    assert server["pid"] == setup["mock"].pid and lab.chunks_match(server, lab.CHUNKS)


@pytest.mark.kernel
@pytest.mark.smoke
@pytest.mark.capability("streams")
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_tls_sdk_streams_through_a_gateway(setup, api, record_property):
    """Four records of one stream: the SDK (TLS client), the gateway's TLS
    server side and its plaintext client side, the mock's server side."""
    record_property("seen", "TLS (OpenSSL uprobes)")
    out = lab.run_client(api, setup["tls"], prompt(setup), "--cafile", setup["cafile"])
    [seen] = client_streams(setup["observer"], out["pid"], 1)
    judge(seen, out["streams"][0], tls=True)
    observer = setup["observer"]
    gateway = server_of(observer, seen, "done", tls=True)
    assert gateway["comm"] == "socat" and lab.chunks_match(gateway, lab.CHUNKS)
    [upstream] = observer.wait_for(
        lambda s: s["pid"] == gateway["pid"] and s["side"] == "client", 1)
    # (tls null: never described; the observer's closing lines say why)
    assert upstream["tls"] is False, (upstream, observer.summary())
    assert lab.chunks_match(upstream, lab.CHUNKS)
    mock = server_of(observer, upstream, "done", tls=False)
    assert mock["pid"] == setup["mock"].pid and lab.chunks_match(mock, lab.CHUNKS)


@pytest.mark.parametrize(("api", "cancel"), [("openai", None), ("anthropic", 3)])
def test_asyncio_tls_on_both_sides(setup, api, cancel):
    """The SDK's async client and uvicorn serving TLS itself: asyncio's TLS
    goes through memory BIOs (OpenSSL makes no system call), and still each
    side's record has its addresses, and a cancel is seen on both."""
    args = ["--cafile", setup["cafile"], "--async"]
    out = lab.run_client(api, setup["uvicorn"], prompt(setup),
                         *args, *(["--cancel-after", str(cancel)] if cancel else []))
    [seen] = client_streams(setup["observer"], out["pid"], 1)
    judge(seen, out["streams"][0], tls=True)
    assert seen["remote"] == setup["uvicorn"].removeprefix("https://")
    server = server_of(setup["observer"], seen, "cancelled" if cancel else "done", tls=True)
    assert server["pid"] == setup["tls_mock"].pid


def chat_body(setup) -> str:
    """A streaming chat completion's JSON, with a fresh private prompt."""
    return ('{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"%s"}]}'
            % prompt(setup))


def streamed_by(setup, argv: list[str], comm: str, tls: bool) -> None:
    """ARGV, a real client, streams one chat completion: the observer has
    its client side (COMM, TLS or not, every chunk, done) and the server's."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "[DONE]" in output
    [seen] = client_streams(setup["observer"], proc.pid, 1)
    assert (seen["comm"], seen["tls"], seen["status"]) == (comm, tls, "done")
    assert lab.chunks_match(seen, lab.CHUNKS)
    server_of(setup["observer"], seen, "done", tls=tls)


@pytest.mark.parametrize("scheme", ["plain", "tls"])
def test_curl(setup, scheme):
    streamed_by(setup, ["curl", "-sN", "--cacert", setup["cafile"], "-H",
                        "content-type: application/json", "-d", chat_body(setup),
                        setup[scheme] + "/v1/chat/completions"], "curl", scheme == "tls")


@contextlib.contextmanager
def _held_by(argv: list[str]):
    """A process of ARGV running (until its stdin closes) for two of the
    observer's scans first, so that what it maps is probed: a library or
    executable nobody ran before is found only at the next scan (every
    SCAN_EVERY_S), which a one-second client outlives."""
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE)
    try:
        time.sleep(2 * SCAN_EVERY_S + 0.5)
        yield
    finally:
        holder.communicate(timeout=10)


def test_wget_through_gnutls(setup):
    """wget, as Debian builds it, speaks TLS through GnuTLS: its row of
    pyxdp.streams.tls_libraries, probed with OpenSSL's programs. A process
    holds libgnutls first, as a service using it would, and a wget that
    starts after is covered by its probes at once."""
    with _held_by([sys.executable, "-c", "import ctypes, sys; "
                   "ctypes.CDLL('libgnutls.so.30'); sys.stdin.read()"]):
        streamed_by(setup, ["wget", "-qO-", f"--ca-certificate={setup['cafile']}",
                            "--header=content-type: application/json",
                            f"--post-data={chat_body(setup)}",
                            setup["tls"] + "/v1/chat/completions"], "wget", True)


def test_node_https_through_openssl_in_its_executable(setup):
    """Node's https: its OpenSSL is linked into the node executable in
    Node's official builds (no libssl is mapped), and probed there. Where
    node is Debian's, linked to libssl, the libssl row sees it instead."""
    node = shutil.which("node")
    assert node, "node is not installed (vagrant/provision.sh installs it)"
    links_libssl = "libssl.so" in subprocess.run(["ldd", node], capture_output=True,
                                                 text=True).stdout
    if not links_libssl:  # the executable is the only place its TLS can be probed
        fd = os.open(node, os.O_RDONLY)
        try:
            assert elf_symbols.function_offsets(fd, os.fstat(fd).st_size, ["SSL_read"])
        finally:
            os.close(fd)
    with _held_by([node, "-e", "process.stdin.resume()"]):  # a node service already running
        streamed_by(setup, [node, str(NODE_CLIENT), setup["tls"] + "/v1/chat/completions",
                            setup["cafile"], chat_body(setup)], "node", True)


def test_cancelled_by_the_reader(setup):
    out = lab.run_client("openai", setup["plain"], prompt(setup), "--cancel-after", "3")
    [seen] = client_streams(setup["observer"], out["pid"], 1)
    judge(seen, out["streams"][0], tls=False)
    assert seen["status"] == "cancelled" and seen["chunks"] == 3
    server = server_of(setup["observer"], seen, "cancelled", tls=False)
    assert 3 <= server["chunks"] < lab.CHUNKS


def test_process_exits_mid_stream(setup):
    out = lab.run_client("anthropic", setup["tls"], prompt(setup), "--cafile", setup["cafile"],
                         "--exit-after", "4")
    [seen] = client_streams(setup["observer"], out["pid"], 1)
    assert (seen["chunks"], seen["status"], seen["tls"]) == (4, "cancelled", True)
    server_of(setup["observer"], seen, "cancelled", tls=True)


def test_connection_reset_mid_stream(setup):
    """This process reads three chunks of a stream, then resets the
    connection (RST): both sides cancelled, the chunks it read counted."""
    port = int(setup["plain"].rsplit(":", 1)[1])
    body = ('{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"%s"}]}'
            % prompt(setup)).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    got = b""
    while got.count(b'"content"') < 3:
        got += sock.recv(65536)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    [seen] = client_streams(setup["observer"], os.getpid(), 1)
    assert (seen["chunks"], seen["status"]) == (got.count(b'"content"'), "cancelled")
    server_of(setup["observer"], seen, "cancelled", tls=False)


def test_streams_in_turn_from_one_sdk_client(setup):
    """A plain (non-SSE) response first, then three streams: three records,
    none for the plain response."""
    out = lab.run_client("openai", setup["plain"], prompt(setup), "--plain-first",
                         "--streams", "3")
    seen = client_streams(setup["observer"], out["pid"], 3)
    for record, client in zip(seen, out["streams"]):
        judge(record, client, tls=False)
    assert len(setup["observer"].wait_for(lambda s: s["pid"] == out["pid"], 4, timeout=1)) == 3


@pytest.mark.parametrize("scheme", ["plain", "tls"])
def test_several_streams_on_one_keepalive_connection(setup, scheme):
    """curl reuses its connection: a JSON response, then an OpenAI, an
    Anthropic and an OpenAI stream in turn on it, each its own record."""
    text = prompt(setup)
    base = setup[scheme]
    openai = ('{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"%s"}]}'
              % text)
    anthropic = ('{"model":"claude-test","max_tokens":64,"stream":true,'
                 '"messages":[{"role":"user","content":"%s"}]}' % text)
    plain = openai.replace('"stream":true', '"stream":false')
    args = ["curl", "-sN", "--cacert", setup["cafile"], "-o", "/dev/null",
            "-H", "content-type: application/json"]
    cmd = [*args, "-d", plain, base + "/v1/chat/completions"]
    for body, path in ((openai, "/v1/chat/completions"), (anthropic, "/v1/messages"),
                       (openai, "/v1/chat/completions")):
        cmd += ["--next", *args, "-d", body, base + path]
    proc = subprocess.Popen(cmd)
    assert proc.wait(30) == 0
    seen = client_streams(setup["observer"], proc.pid, 3)
    assert len({s["local"] for s in seen}) == 1  # one connection
    assert [s["api"] for s in seen] == ["openai", "anthropic", "openai"]
    for record in seen:
        assert record["status"] == "done" and lab.chunks_match(record, lab.CHUNKS)
    servers = setup["observer"].wait_for(
        lambda s: s["side"] == "server" and s["remote"] == seen[0]["local"], 3)
    servers.sort(key=lambda s: s["started_ns"])
    assert [(s["api"], s["status"]) for s in servers] == [
        ("openai", "done"), ("anthropic", "done"), ("openai", "done")]
    assert all(lab.chunks_match(s, lab.CHUNKS) for s in servers)


def test_two_streams_interleaved_in_one_process(setup):
    out = lab.run_client("anthropic", setup["plain"], prompt(setup), "--parallel",
                         "--streams", "2")
    seen = client_streams(setup["observer"], out["pid"], 2)
    assert len({s["local"] for s in seen}) == 2  # two connections
    # at the same time: each started before the other ended
    a, b = seen
    assert b["started_ns"] < a["started_ns"] + a["duration_ms"] * 1e6
    for record in seen:
        assert record["status"] == "done" and lab.chunks_match(record, lab.CHUNKS)
        assert any(lab.gap_agrees(record["chunk_gap_ms"]["p50"], c) for c in out["streams"])


def test_zz_ends_cleanly_and_says_nothing_private(setup):
    """Last (zz): SIGINT ends the observer with status 0, its programs and
    probes gone and tracefs as it was; nothing it printed holds a prompt or
    the reply."""
    observer = setup["observer"]
    progs, perf_events = lab.held_probes(observer.proc.pid)
    # 17 syscall tracepoints and sched_process_exit as perf events, and
    # sched_process_fork as a raw tracepoint (a link, not a perf event);
    # 8 uprobes a library, running 5 programs
    assert perf_events >= 18 + 8 and len(progs) == 19 + 5
    assert observer.interrupt() == 0
    text = "".join(observer.stdout) + "".join(observer.stderr)
    for secret in setup["prompts"] + [lab.REPLY[:20], lab.REPLY[20:40]]:
        assert secret not in text
    assert "not seen:" in observer.stderr[0]
    assert lab.tracefs_mounted() == setup["tracefs"]
    assert not lab.programs_left(progs)
