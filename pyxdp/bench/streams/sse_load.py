# SPDX-License-Identifier: Apache-2.0
"""The load of the streams section: an SSE server and its clients, each an
asyncio process of its own, on 127.0.0.1, plaintext and TLS (Python's ssl
module: OpenSSL 3, linked dynamically, so the observer's uprobes see it).

The server answers `POST /v1/chat/completions?chunks=N&interval_us=I` as an
OpenAI-compatible server streams: HTTP/1.1 200, `text/event-stream`,
chunked transfer encoding, one `chat.completion.chunk` event per write()
(its own HTTP chunk), then `data: [DONE]` and the last chunk. Paced
(I > 0), chunk k goes at k*I after the request; flooding (I = 0), as fast
as the reader takes them. It counts the chunks it writes and when.

The clients open every connection first (TLS handshakes included), then
send the requests spread over one chunk interval, so that the paced phase
is steady. Each times every event it reads with CLOCK_MONOTONIC (events of
one read share its time) and keeps the gaps between chunks.
"""

import asyncio
import resource
import ssl
import time
from urllib.parse import parse_qs, urlsplit

MODEL = "bench"
_DELTA = (b'{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,'
          b'"model":"' + MODEL.encode() + b'","choices":[{"index":0,'
          b'"delta":{"content":" token"},"finish_reason":null}]}')


def _http_chunk(data: bytes) -> bytes:
    event = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


CHUNK = _http_chunk(_DELTA)
END = _http_chunk(b"[DONE]") + b"0\r\n\r\n"
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")
BODY = (b'{"model":"' + MODEL.encode() + b'","stream":true,'
        b'"messages":[{"role":"user","content":"Say something."}]}')
STARTED = "started"  # the clients' word that every request is written
FLOOD_YIELD = 8  # a flooding stream lets the others write every this many chunks


def request(chunks: int, interval_us: int) -> bytes:
    return (b"POST /v1/chat/completions?chunks=%d&interval_us=%d HTTP/1.1\r\n"
            b"Host: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (chunks, interval_us, len(BODY), BODY))


def raise_fd_limit() -> None:
    """A thousand streams need more than the usual 1024 fds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# --- the server -----------------------------------------------------------------------------

class _Counter:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.chunks = 0
        self.first_ns = 0
        self.last_ns = 0

    def wrote(self, n: int = 1) -> None:
        now = time.monotonic_ns()
        if not self.chunks:
            self.first_ns = now
        self.chunks += n
        self.last_ns = now


class _ServerStream(asyncio.Protocol):
    def __init__(self, counter: _Counter):
        self.counter = counter
        self.buf = b""
        self.task: asyncio.Task | None = None
        self.writable: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.task is not None:
            return  # one stream per connection: the client closes after it
        self.buf += data
        head, sep, body = self.buf.partition(b"\r\n\r\n")
        if not sep:
            return
        lines = head.decode("latin-1").split("\r\n")
        length = next((int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
                       if k.strip().lower() == "content-length"), 0)
        if len(body) < length:
            return
        query = parse_qs(urlsplit(lines[0].split()[1]).query)
        chunks, interval_us = int(query["chunks"][0]), int(query["interval_us"][0])
        self.task = asyncio.get_running_loop().create_task(self._stream(chunks, interval_us))

    async def _stream(self, chunks: int, interval_us: int) -> None:
        loop = asyncio.get_running_loop()
        write = self.transport.write
        write(HEAD)
        if interval_us:
            start, interval = loop.time(), interval_us / 1e6
            for k in range(1, chunks + 1):
                delay = start + k * interval - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.transport.is_closing():
                    return
                write(CHUNK)
                self.counter.wrote()
        else:
            for k in range(chunks):
                if self.writable is not None:
                    await self.writable
                if self.transport.is_closing():
                    return
                write(CHUNK)
                self.counter.wrote()
                if k % FLOOD_YIELD == FLOOD_YIELD - 1:
                    await asyncio.sleep(0)
        write(END)

    def pause_writing(self) -> None:
        self.writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.writable is not None:
            self.writable.set_result(None)
            self.writable = None

    def connection_lost(self, exc) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.resume_writing()


def server_main(conn, cert: str, key: str) -> None:
    """Serve plaintext and TLS until told to stop (None). Sends its two ports,
    then answers "reset" (zero the count) and "count" (chunks, first and last
    write's CLOCK_MONOTONIC ns)."""
    raise_fd_limit()
    asyncio.run(_serve(conn, cert, key))


async def _serve(conn, cert: str, key: str) -> None:
    loop = asyncio.get_running_loop()
    counter = _Counter()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    servers = [await loop.create_server(lambda: _ServerStream(counter), "127.0.0.1", 0,
                                        backlog=4096, ssl=tls) for tls in (None, ctx)]
    conn.send({"plain": servers[0].sockets[0].getsockname()[1],
               "tls": servers[1].sockets[0].getsockname()[1]})
    stopped = loop.create_future()

    def command() -> None:
        op = conn.recv()
        if op is None:
            stopped.set_result(None)
        elif op == "reset":
            counter.reset()
            conn.send(True)
        else:
            conn.send({"chunks": counter.chunks, "first_ns": counter.first_ns,
                       "last_ns": counter.last_ns})

    loop.add_reader(conn.fileno(), command)
    await stopped
    for server in servers:
        server.close()


# --- the clients ----------------------------------------------------------------------------

class _ClientStream(asyncio.Protocol):
    def __init__(self, chunks: int, gaps: list[int]):
        self.chunks = chunks
        self.gaps = gaps
        self.events = 0
        self.last_ns = 0
        self.tail = b""
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        joined = self.tail + data
        # every event ends with a blank line; no other bytes of the answer hold "\n\n"
        events = joined.count(b"\n\n") - self.tail.count(b"\n\n")
        self.tail = joined[-8:]
        new_chunks = max(0, min(self.events + events, self.chunks) - self.events)
        for _ in range(new_chunks):
            if self.last_ns:
                self.gaps.append(now - self.last_ns)
            self.last_ns = now
        self.events += events
        if self.events > self.chunks and self.tail.endswith(b"0\r\n\r\n"):
            self.transport.close()
            if not self.done.done():
                self.done.set_result((self.chunks, True))

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_result((min(self.events, self.chunks), False))  # cut short


async def _run(port: int, tls: bool, streams: int, chunks: int, interval_us: int,
               connect_s: float, started=None) -> dict:
    loop = asyncio.get_running_loop()
    ctx = None
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the run's own self-signed certificate
    gaps: list[int] = []
    errors: list[str] = []
    sem = asyncio.Semaphore(64)  # handshakes in flight at once

    async def connect(i: int):
        async with sem:
            _, proto = await loop.create_connection(lambda: _ClientStream(chunks, gaps),
                                                    "127.0.0.1", port, ssl=ctx)
            return proto

    results = await asyncio.wait_for(asyncio.gather(*(connect(i) for i in range(streams)),
                                                    return_exceptions=True), connect_s)
    protos = [p for p in results if isinstance(p, _ClientStream)]
    errors += sorted({f"connect: {type(p).__name__}" for p in results
                      if not isinstance(p, _ClientStream)})
    req = request(chunks, interval_us)
    start = loop.time()
    spread = interval_us / 1e6 if interval_us else 0.0
    for i, proto in enumerate(protos):
        due = start + spread * i / max(1, len(protos))
        if due > loop.time():
            await asyncio.sleep(due - loop.time())
        proto.transport.write(req)
    if started is not None:
        started()
    timeout = 60.0 + chunks * interval_us / 1e6
    done = await asyncio.wait_for(asyncio.gather(*(p.done for p in protos)), timeout)
    for p in protos:
        p.transport.close()
    received = sum(n for n, _ in done)
    complete = sum(1 for _, whole in done if whole)
    if complete < streams:
        errors.append(f"{streams - complete} of {streams} streams did not end whole")
    gaps.sort()
    return {"streams": complete, "chunks": received, "errors": errors,
            "gap_p50_ms": gaps[len(gaps) // 2] / 1e6 if gaps else None,
            "gap_p99_ms": gaps[min(len(gaps) - 1, len(gaps) * 99 // 100)] / 1e6 if gaps else None}


def client_main(conn) -> None:
    """Run what each command asks ({"port", "tls", "streams", "chunks",
    "interval_us", "connect_s"}), answering STARTED once every request is
    written, then with what the clients read; None ends it."""
    raise_fd_limit()
    while (job := conn.recv()) is not None:
        try:
            conn.send(asyncio.run(_run(**job, started=lambda: conn.send(STARTED))))
        except Exception as exc:  # the run fails, the bench goes on and reports it
            conn.send({"streams": 0, "chunks": 0, "gap_p50_ms": None, "gap_p99_ms": None,
                       "errors": [f"clients: {type(exc).__name__}: {exc}"]})
