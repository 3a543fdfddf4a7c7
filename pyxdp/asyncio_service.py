"""An asyncio service on a thread of its own: serve_forever() blocks;
start() runs it in a thread and returns once it is ready; stop() ends it.
The token server and the asyncio relay are both one."""

import asyncio
import threading

from .errors import ZerolayerError


class AsyncioService:
    name = "service"  # for the thread and for errors

    def __init__(self):
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    async def _run(self, ready: threading.Event | None) -> None:
        """The service: set READY once it accepts work, then return once
        self._stopped is set."""
        raise NotImplementedError

    async def _main(self, ready: threading.Event | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        await self._run(ready)

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

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
