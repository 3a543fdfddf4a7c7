# SPDX-License-Identifier: Apache-2.0
"""The reference relay: the same job as pyxdp/relay/sockmap_relay.py, done in userspace
with asyncio, every frame validated by pyxdp.proto.frames.StreamDecoder.

It is the baseline the in-kernel relay is measured against, and a second
implementation of the same rules for the tests to compare with: whole frames
only, EOF passed on at a frame boundary (half-close), and a stream that
breaks (unknown type, oversize length, EOF inside a frame, reset) closes the
pair, the offender with a RST. Its stats have the shape of Relay.stats().
"""

import asyncio
import socket

from pyxdp.proto import counters, frames
from pyxdp.proto.frames import StreamBroken, StreamDecoder
from pyxdp.relay import sockets as relay_sockets
from pyxdp.relay.asyncio_service import AsyncioService, reset
from pyxdp.relay.schema import BROKEN, CLOSE_REASONS, FIELDS


class AsyncioRelay(AsyncioService):
    """serve_forever() blocks; start() runs it in a thread, stop() ends it.
    The sockmap relay also keeps one, without a listener, for the pairs the
    kernel cannot take (adopt())."""

    name = "asyncio relay"

    def __init__(self, listen: str | None, upstream: str, *,
                 max_length: int = frames.DEFAULT_MAX_LENGTH):
        _, self._upstream_addr = relay_sockets.parse_address(upstream)
        # Without LISTEN it only relays pairs handed to it by adopt().
        super().__init__(listen)
        self.upstream = upstream
        self.max_length = max_length
        self.pairs = {"accepted": 0, "active": 0, "closed": 0, "refused": 0,
                      "upstream_unreachable": 0, "userspace": 0}
        self.closed = dict.fromkeys(CLOSE_REASONS, 0)
        self.counters = dict.fromkeys(FIELDS, 0)
        # The loop holds tasks weakly, and a pair whose sockets are not being
        # read is referenced only by its own tasks: hold them here.
        self._tasks: set[asyncio.Task] = set()

    def stats(self) -> dict:
        return {
            "engine": "asyncio",
            "listen": self.address,
            "upstream": self.upstream,
            "max_length": self.max_length,
            "pairs": dict(self.pairs),
            "closed": dict(self.closed),
            "counters": counters.nest(self.counters, FIELDS),
        }

    # --- one pair -------------------------------------------------------------------------

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        """Forward whole, valid frames from READER to WRITER until EOF ("eof")
        or a failure (its reason)."""
        decoder = StreamDecoder(self.max_length)
        try:
            while data := await reader.read(65536):
                try:
                    batch = decoder.feed(data)
                except StreamBroken as exc:
                    # Whole frames that came before the bad header still go on.
                    self._forward(exc.frames, writer)
                    await writer.drain()
                    self.counters[f"malformed.{exc.reason}"] += 1
                    return exc.reason
                if batch:
                    self._forward(batch, writer)
                    await writer.drain()
        except ConnectionError:
            return "reset"
        if not decoder.at_boundary:
            return "short_header" if decoder.pending < frames.HEADER_LEN else "truncated"
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            pass  # the other side is already gone
        return "eof"

    def _forward(self, batch: list[frames.Frame], writer: asyncio.StreamWriter) -> None:
        c = self.counters
        for f in batch:
            c[f"frames.{f.type.label}"] += 1
            c["payload_bytes"] += len(f.payload)
        c["redirected"] += len(batch)
        writer.write(frames.encode_frames(batch))

    def _hold(self, task: asyncio.Task | None) -> asyncio.Task:
        assert task is not None  # called from inside a coroutine, so a task runs it
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _connection(self, creader: asyncio.StreamReader,
                          cwriter: asyncio.StreamWriter) -> None:
        self._hold(asyncio.current_task())
        self.pairs["accepted"] += 1
        try:
            ureader, uwriter = await asyncio.open_connection(*self._upstream_addr[:2])
        except OSError:
            self.pairs["upstream_unreachable"] += 1
            cwriter.close()
            return
        await self._relay(creader, cwriter, ureader, uwriter)

    def adopt(self, client: socket.socket, upstream: socket.socket) -> None:
        """Relay two connected sockets from now on (from any thread)."""
        assert self._loop is not None, "adopt() before start()"
        asyncio.run_coroutine_threadsafe(self._adopt(client, upstream), self._loop)

    async def _adopt(self, client: socket.socket, upstream: socket.socket) -> None:
        self._hold(asyncio.current_task())
        creader, cwriter = await asyncio.open_connection(sock=client)
        ureader, uwriter = await asyncio.open_connection(sock=upstream)
        await self._relay(creader, cwriter, ureader, uwriter)

    async def _relay(self, creader, cwriter, ureader, uwriter) -> None:
        self.pairs["userspace"] += 1
        self.pairs["active"] += 1
        up = self._hold(asyncio.ensure_future(self._pump(creader, uwriter)))
        down = self._hold(asyncio.ensure_future(self._pump(ureader, cwriter)))
        reason = "relay_stopped"
        try:
            reason = await self._until_ended({up: cwriter, down: uwriter})
        finally:
            for task in (up, down):
                task.cancel()
            for w in (cwriter, uwriter):
                w.close()
            self.pairs["active"] -= 1
            self.pairs["closed"] += 1
            self.closed[reason] += 1

    @staticmethod
    async def _until_ended(offender_of: dict) -> str:
        """Wait for both directions to end ("eof"), or the first failure:
        its reason; a broken stream's source is reset."""
        pending = set(offender_of)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                reason = task.result()
                if reason != "eof":
                    if reason in BROKEN:
                        reset(offender_of[task])
                    return reason
        return "eof"
