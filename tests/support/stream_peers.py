# SPDX-License-Identifier: Apache-2.0
"""Plaintext SSE peers that load the observer as strangers do, run as their
own processes (the observer ignores its own): on loopback only, each run
bounded in count and time.

    stream_peers.py many PORT N CHUNKS     N streams open at once, on N connections:
                                           every server writes one chunk, waits until
                                           all N have, then the rest and [DONE]
    stream_peers.py fork-server PORT CHUNKS  one server that forks mid-stream: its
                                           parent exits, the child writes the rest
    stream_peers.py fork-client PORT       one client that forks mid-stream: its
                                           parent exits, the child reads the rest
    stream_peers.py flood PORT EVENTS      one stream of EVENTS chunks, written as
                                           fast as the socket takes them
    stream_peers.py models PORT N PREFIX   N streams in turn, each naming its own model
                                           (PREFIX-0 ... PREFIX-N-1), both sides here

Each prints one JSON line: what its clients read (streams, chunks), the
judge the observer's records are held to.
"""

import asyncio
import json
import os
import socket
import sys
import time

HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")
REQUEST = (b'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n'
           b'Content-Type: application/json\r\nContent-Length: %d\r\n\r\n')
BODY = b'{"model": "zl-peer", "stream": true, "messages": []}'
DEADLINE_S = 120.0


def chunk(i: int, model: bytes = b"zl-peer") -> bytes:
    event = (b'data: {"model": "%s", "choices": [{"delta": {"content": "t%d"}}]}\n\n'
             % (model, i))
    return b"%x\r\n%s\r\n" % (len(event), event)


DONE = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"


def request() -> bytes:
    return REQUEST % len(BODY) + BODY


def count_chunks(data: bytes) -> int:
    return data.count(b'"delta": {"content"')


async def _many(port: int, n: int, chunks: int) -> dict:
    first_written = 0
    all_first = asyncio.Event()

    async def serve(reader, writer):
        nonlocal first_written
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(len(BODY))
        writer.write(HEAD + chunk(0))
        await writer.drain()
        first_written += 1
        if first_written == n:
            all_first.set()
        await all_first.wait()
        for i in range(1, chunks):
            writer.write(chunk(i))
        writer.write(DONE)
        await writer.drain()
        writer.close()

    async def client():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request())
        await writer.drain()
        data = await reader.read()  # until the server's close
        writer.close()
        return count_chunks(data)

    server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=4096)
    async with server:
        got = await asyncio.gather(*(client() for _ in range(n)))  # n < the listen backlog
    return {"streams": len(got), "chunks": sum(got)}


def many(port: int, n: int, chunks: int) -> dict:
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (4 * n + 1024, 4 * n + 1024))
    return asyncio.run(asyncio.wait_for(_many(port, n, chunks), DEADLINE_S))


def fork_server(port: int, chunks: int) -> dict:
    """Reads a request, writes the head and half the chunks, forks; the
    parent leaves at once (no close: its exit), the child writes the rest."""
    srv = socket.create_server(("127.0.0.1", port))
    conn, _ = srv.accept()
    srv.close()
    conn.settimeout(DEADLINE_S)
    data = b""
    while not data.endswith(BODY):
        data += conn.recv(65536)
    half = chunks // 2
    conn.sendall(HEAD + b"".join(chunk(i) for i in range(half)))
    time.sleep(0.2)
    if os.fork():
        os._exit(0)
    time.sleep(0.5)  # the parent has gone
    for i in range(half, chunks):
        conn.sendall(chunk(i))
        time.sleep(0.02)
    conn.sendall(DONE)
    time.sleep(0.2)
    conn.close()
    return {"streams": 1, "chunks": chunks}


def fork_client(port: int) -> dict:
    """Writes a request, reads until a chunk came, forks; the parent leaves
    at once, the child reads to the end and says what it read."""
    c = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
    c.sendall(request())
    data = b""
    while count_chunks(data) < 1:
        data += c.recv(65536)
    if os.fork():
        os._exit(0)  # the parent leaves mid-stream; the child, holding stdout, says what it read
    time.sleep(0.5)
    while not data.endswith(b"0\r\n\r\n"):
        more = c.recv(65536)
        if not more:
            break
        data += more
    c.close()
    return {"streams": 1, "chunks": count_chunks(data)}


def flood(port: int, events: int) -> dict:
    """A server writing EVENTS chunks as fast as the socket takes them, in
    writes of 64 KiB; the client reads and counts them."""
    srv = socket.create_server(("127.0.0.1", port))
    pid = os.fork()
    if pid == 0:  # the client
        srv.close()
        c = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
        c.sendall(request())
        n, tail = 0, b""
        while True:
            more = c.recv(1 << 20)
            if not more:
                break
            block = tail + more
            n += block.count(b'"delta": {"content"')
            tail = block[-64:]
            n -= tail.count(b'"delta": {"content"')
        n += tail.count(b'"delta": {"content"')
        print(json.dumps({"streams": 1, "chunks": n}), flush=True)
        os._exit(0)
    conn, _ = srv.accept()
    srv.close()
    data = b""
    while not data.endswith(BODY):
        data += conn.recv(65536)
    conn.sendall(HEAD)
    batch = bytearray()
    for i in range(events):
        batch += chunk(i)
        if len(batch) >= 65536:
            conn.sendall(batch)
            batch.clear()
    conn.sendall(bytes(batch) + DONE)
    conn.close()
    os.waitpid(pid, 0)
    return {}


def models(port: int, n: int, prefix: str) -> dict:
    """N streams one after the other, stream I naming model PREFIX-I."""
    srv = socket.create_server(("127.0.0.1", port))
    got = 0
    for i in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
        c.sendall(request())
        conn, _ = srv.accept()
        data = b""
        while not data.endswith(BODY):
            data += conn.recv(65536)
        name = f"{prefix}-{i}".encode()
        conn.sendall(HEAD + chunk(0, name) + chunk(1, name) + DONE)
        conn.close()
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            data += c.recv(65536)
        c.close()
        got += count_chunks(data)
    srv.close()
    return {"streams": n, "chunks": got}


def main() -> None:
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "many":
        out = many(port, int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "fork-server":
        out = fork_server(port, int(sys.argv[3]))
    elif mode == "fork-client":
        out = fork_client(port)
    elif mode == "flood":
        out = flood(port, int(sys.argv[3]))
    elif mode == "models":
        out = models(port, int(sys.argv[3]), sys.argv[4])
    else:
        raise SystemExit(f"unknown mode {mode}")
    if out:
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
