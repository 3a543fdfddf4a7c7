# SPDX-License-Identifier: Apache-2.0
"""A test token server and client over TCP: `zerolayer serve` and
`zerolayer send`.

The server answers PING with PONG, and a REQUEST with TOKEN frames and a
DONE. Its "model" echoes the prompt back a word at a time (cycled to
max_tokens when that is larger), so a test knows the exact answer:
answer(request) is it. A peer that breaks the stream (unknown type,
oversize length) is reset, as docs/spec.md §4.1 says a receiver must.
"""

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field

from pyxdp.errors import ZerolayerError
from pyxdp.proto.frames import Frame, FrameType, StreamBroken, StreamDecoder, encode
from pyxdp.relay import sockets as relay_sockets
from pyxdp.relay.asyncio_service import AsyncioService, reset


def request_payload(prompt: str, max_tokens: int | None = None) -> bytes:
    body: dict[str, str | int] = {"prompt": prompt}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return json.dumps(body).encode()


def answer(payload: bytes) -> list[str]:
    """The server's tokens for a REQUEST payload."""
    try:
        body = json.loads(payload)
        prompt, max_tokens = str(body.get("prompt", "")), body.get("max_tokens")
    except (ValueError, AttributeError):
        prompt, max_tokens = payload.decode("utf-8", errors="replace"), None
    words = prompt.split() or ["(empty)"]
    count = max_tokens if isinstance(max_tokens, int) and max_tokens >= 0 else len(words)
    return [(" " if i else "") + words[i % len(words)] for i in range(count)]


# --- server ---------------------------------------------------------------------------

@dataclass
class ServerStats:
    connections: int = 0
    requests: int = 0
    pings: int = 0
    broken: int = 0


class TokenServer(AsyncioService):
    """serve_forever() blocks; start() runs it in a thread (tests), stop()
    ends it. TOKEN_DELAY paces tokens like a model would."""

    name = "token server"

    def __init__(self, listen: str, *, token_delay: float = 0.0):
        super().__init__(listen)
        self.token_delay = token_delay
        self.stats = ServerStats()

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        decoder = StreamDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    await self._answer(frame, writer)
        except StreamBroken:
            self.stats.broken += 1
            reset(writer)  # the close() below is then a no-op
        except ConnectionError:
            pass
        finally:  # also when stop() cancels it
            writer.close()

    async def _answer(self, frame: Frame, writer: asyncio.StreamWriter) -> None:
        if frame.type is FrameType.PING:
            self.stats.pings += 1
            writer.write(encode(FrameType.PONG))
        elif frame.type is FrameType.REQUEST:
            self.stats.requests += 1
            tokens = answer(frame.payload)
            for token in tokens:
                writer.write(encode(FrameType.TOKEN, token))
                if self.token_delay:
                    await writer.drain()
                    await asyncio.sleep(self.token_delay)
            writer.write(encode(FrameType.DONE, json.dumps({"completion_tokens": len(tokens)})))
        await writer.drain()


# --- client -----------------------------------------------------------------------------

@dataclass
class Exchange:
    """What came back for one request: frames in order, and timings."""

    frames: list[Frame] = field(default_factory=list)
    connect_s: float = 0.0
    first_token_s: float | None = None
    total_s: float = 0.0

    @property
    def done(self) -> bool:
        return bool(self.frames) and self.frames[-1].type is FrameType.DONE


def send(address: str, prompt: str, *, max_tokens: int | None = None, ping: bool = False,
         timeout: float = 10.0, on_frame=None) -> Exchange:
    """Connect to ADDRESS, optionally PING, send one REQUEST, read to DONE.
    ON_FRAME(frame) is called as each frame arrives."""
    t0 = time.monotonic()
    sock = relay_sockets.connect(address, timeout=timeout)
    ex = Exchange(connect_s=time.monotonic() - t0)
    sock.settimeout(timeout)
    decoder = StreamDecoder()
    try:
        out = encode(FrameType.PING) if ping else b""
        sock.sendall(out + encode(FrameType.REQUEST, request_payload(prompt, max_tokens)))
        while not ex.done:
            try:
                data = sock.recv(65536)
            except socket.timeout:
                raise ZerolayerError(f"no DONE from {address} within {timeout:g} s") from None
            except ConnectionResetError:
                raise ZerolayerError(f"{address} reset the connection") from None
            if not data:
                raise ZerolayerError(f"{address} closed the connection before DONE")
            try:
                new = decoder.feed(data)
            except StreamBroken as exc:
                raise ZerolayerError(f"{address} sent a broken stream: {exc}") from None
            for frame in new:
                if frame.type is FrameType.TOKEN and ex.first_token_s is None:
                    ex.first_token_s = time.monotonic() - t0
                ex.frames.append(frame)
                if on_frame is not None:
                    on_frame(frame)
                if frame.type is FrameType.DONE:
                    break
    finally:
        sock.close()
    ex.total_s = time.monotonic() - t0
    return ex
