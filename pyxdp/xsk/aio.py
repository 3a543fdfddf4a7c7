# SPDX-License-Identifier: Apache-2.0
"""AF_XDP batches in an asyncio program, without a thread:

    async for batch in xsk.batches():
        for i in range(len(batch)):
            handle(batch.source(i), bytes(batch.payload(i)))

Waiting. While frames keep coming, batches are taken with the socket's
non-blocking recv(timeout=0), which also kicks the kernel when the fill
ring's need_wakeup flag asks for it, and the event loop gets a turn between
batches so other tasks run. Only when the RX ring is empty does the iterator
wait, with the socket's fd in the running loop's reader set
(loop.add_reader). The reader is removed as soon as that wait ends, however
it ends, so nothing stays registered between batches: leaving the loop by
`break`, by an exception or by task.cancel() leaves the selector clean.

Releasing. The iterator releases each batch (recycles its chunks) when the
consumer asks for the next one or the loop ends; until then the batch is
the consumer's. Copy out what must outlive it (`bytes(batch.payload(i))`).
Releasing a batch earlier (`with batch:`, batch.release()) is fine:
releasing twice does nothing. After a `break`, the last batch is released
when the iterator is closed: at once under
`async with contextlib.aclosing(xsk.batches()) as batches:`, otherwise when
the event loop finalizes the abandoned iterator, a moment later.

Closing. xsk.close() ends the iteration cleanly: a waiting iterator drops its
reader before the fd is closed and stops. Close the socket from the event
loop's thread (from another thread: loop.call_soon_threadsafe(xsk.close)).

Opening. XskSocket() may be called inside the running loop: the netlink
queries it makes run in a short-lived thread there (pyxdp/xdp/netlink.py).

One waiter per socket: a second coroutine waiting on the same socket would
replace the first one's reader and leave it asleep, so it is refused.
"""

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from pyxdp.errors import ZerolayerError
from pyxdp.xsk.batch import Batch


class ReceivingSocket(Protocol):
    """What the iterator uses of pyxdp.xsk.socket.XskSocket, named here so
    that the socket imports this module and not the other way round."""

    ifname: str
    queue: int

    @property
    def closed(self) -> bool: ...

    def fileno(self) -> int: ...

    def recv(self, max_frames: int = 256, timeout: float | None = 0.0) -> Batch: ...

    def before_close(self, hook: Callable[[], None]) -> Callable[[], None]: ...


# Sockets a coroutine is waiting on now, with its reader registered.
_waiting: "weakref.WeakSet[ReceivingSocket]" = weakref.WeakSet()


def batches(xsk: ReceivingSocket, max_frames: int = 256) -> AsyncIterator[Batch]:
    """Batches of up to MAX_FRAMES frames from XSK, as they arrive, until XSK
    is closed."""
    if max_frames < 1:
        raise ZerolayerError(f"a batch holds at least 1 frame, not {max_frames}")
    return _batches(xsk, max_frames)


async def _batches(xsk: ReceivingSocket, max_frames: int) -> AsyncIterator[Batch]:
    while not xsk.closed:
        batch = xsk.recv(max_frames, timeout=0)
        if not batch:
            if not await _readable(xsk):
                return
            continue
        try:
            yield batch
        finally:
            batch.release()
        await asyncio.sleep(0)  # frames may never stop: let the other tasks run


async def _readable(xsk: ReceivingSocket) -> bool:
    """Wait until XSK has frames to read (True) or is closed (False)."""
    if xsk in _waiting:
        raise ZerolayerError(
            f"another coroutine is already waiting on the AF_XDP socket on {xsk.ifname} "
            f"queue {xsk.queue}: read one socket from one task")
    loop = asyncio.get_running_loop()
    fd = xsk.fileno()
    woken: asyncio.Future[bool] = loop.create_future()
    registered = False

    def wake(readable: bool) -> None:
        if not woken.done():
            woken.set_result(readable)

    def unregister() -> None:
        # Only once: after close() the fd number may already be someone else's.
        nonlocal registered
        if registered:
            registered = False
            loop.remove_reader(fd)

    def closing() -> None:
        unregister()
        if not loop.is_closed():
            wake(False)

    loop.add_reader(fd, wake, True)
    registered = True
    _waiting.add(xsk)
    forget = xsk.before_close(closing)
    try:
        return await woken
    finally:
        forget()
        unregister()
        _waiting.discard(xsk)
