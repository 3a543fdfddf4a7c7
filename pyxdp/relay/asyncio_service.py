# SPDX-License-Identifier: Apache-2.0
"""An asyncio service on a thread of its own, optionally serving a TCP
listener: serve_forever() blocks; start() runs it in a thread and returns
once it is ready; stop() ends it. The token server and the asyncio relay are
both one. reset() ends a stream whose peer broke it, with a RST."""

import asyncio
import threading

from pyxdp.errors import ZerolayerError
from pyxdp.relay import sockets as relay_sockets


class AsyncioService:
    name = "service"  # for the thread and for errors

    def __init__(self, listen: str | None = None):
        """With LISTEN (ADDR:PORT), each connection to it runs _connection();
        the listener is open (and self.address known) from here on."""
        self._sock = relay_sockets.listener(listen) if listen else None
        self.address = (relay_sockets.format_address(self._sock.getsockname())
                        if self._sock is not None else None)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        """One client of the listener."""
        raise NotImplementedError

    async def _main(self, ready: threading.Event | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        server = None
        if self._sock is not None:
            server = await asyncio.start_server(self._connection, sock=self._sock)
        if ready is not None:
            ready.set()
        await self._stopped.wait()
        if server is not None:
            # Not wait_closed(): from Python 3.12.1 it waits for every client
            # to go. asyncio.run() cancels the tasks still running instead.
            server.close()

    def serve_forever(self, ready: threading.Event | None = None) -> None:
        asyncio.run(self._main(ready))

    def start(self):
        ready = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, args=(ready,),
                                        name=f"zerolayer-{self.name}", daemon=True)
        self._thread.start()
        if not ready.wait(5):
            raise ZerolayerError(f"the {self.name} did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(5)
        if self._sock is not None:
            self._sock.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a RST: the peer broke the stream."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            relay_sockets.reset_on_close(sock)
        except OSError:
            pass
    writer.transport.abort()
