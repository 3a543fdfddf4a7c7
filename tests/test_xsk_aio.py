# SPDX-License-Identifier: Apache-2.0
"""`async for batch in xsk.batches()` on a real AF_XDP socket in a veth lab
with zerolayer attached, fed by the live-frames generator. Each test runs
its own event loop (asyncio.run) and opens its socket inside it: every
datagram arrives, the loop keeps running other tasks while the socket waits
in its reader set, and however the iteration ends (cancel, break, close)
nothing is left registered."""

import asyncio
import contextlib

import pytest

from pyxdp.errors import ZerolayerError
from pyxdp.lab import generator
from pyxdp.xsk.socket import XskSocket
from support.loop_ticker import LoopTicker
from support.xsk_helpers import xdp_counters

# A consumer that never wakes would hang its event loop: fail in a minute.
pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]

# The generator sends a tenth of a second's worth at a time: at this rate a
# burst is 200 datagrams, which a 256-chunk socket holds whatever the consumer
# is doing, so a lost datagram can only mean chunks that were not given back.
RATE = 2000
SMALL_UMEM = 256
GUARD_S = 20  # a wait that would otherwise hang fails after this long


def open_xsk(lab, **options) -> XskSocket:
    return XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, **options)


def tokens(lab) -> generator.Mix:
    return generator.Mix.single(generator.token_mix(lab, frames_per_datagram=1).templates[0])


def registered(fd: int) -> bool:
    """Whether FD is in the running loop's selector (asyncio's own map)."""
    return fd in asyncio.get_running_loop()._selector.get_map()  # type: ignore[attr-defined]


async def until_waiting(fd: int, task: asyncio.Task) -> int:
    """Give the loop turns until TASK waits with FD in the reader set;
    returns the turns it took. Fails if TASK ends or never registers."""
    for turn in range(1000):
        if registered(fd):
            return turn
        assert not task.done(), task
        await asyncio.sleep(0)
    raise AssertionError("the socket never went into the loop's reader set")


async def count_frames(xsk: XskSocket, n: int, release_itself: bool = False) -> int:
    got = 0
    async for batch in xsk.batches():
        if release_itself:
            with batch:  # the iterator releases it again: harmless
                got += len(batch)
        else:
            got += len(batch)
        if got >= n:
            break
    return got


@pytest.mark.parametrize("release_itself", [False, True], ids=["iterator releases",
                                                                "consumer releases too"])
@pytest.mark.kernel
def test_every_datagram_arrives_through_async_for(rig, release_itself):
    """Eight times the socket's chunks go through it: only chunks given
    back can hold them all."""
    lab, gen = rig
    n = 8 * SMALL_UMEM

    async def main():
        with open_xsk(lab, frames=SMALL_UMEM) as xsk:
            consumer = asyncio.create_task(count_frames(xsk, n, release_itself))
            await until_waiting(xsk.fileno(), consumer)
            await asyncio.to_thread(gen.run, tokens(lab), n, rate=RATE)
            got = await asyncio.wait_for(consumer, GUARD_S)
            assert not registered(xsk.fileno())
            return got, xsk.statistics()

    before = xdp_counters(lab)["redirected"]
    got, statistics = asyncio.run(main())
    assert got == n
    assert statistics.lost == 0
    assert xdp_counters(lab)["redirected"] - before == n


def test_the_loop_runs_other_tasks_while_the_socket_waits(rig):
    lab, gen = rig
    ticker = LoopTicker()

    async def main():
        with open_xsk(lab) as xsk:
            fd = xsk.fileno()
            consumer = asyncio.create_task(count_frames(xsk, 10))
            ticking = asyncio.create_task(ticker.run_until(consumer))
            await until_waiting(fd, consumer)
            seen = ticker.ticks
            for _ in range(100):  # the consumer waits; everyone else runs
                await asyncio.sleep(0)
                assert registered(fd) and not consumer.done()
            assert ticker.ticks >= seen + 100
            await asyncio.to_thread(gen.send, tokens(lab).templates[0], 10)
            got = await asyncio.wait_for(consumer, GUARD_S)
            await ticking
            return got

    assert asyncio.run(main()) == 10


def test_other_tasks_run_between_batches_while_frames_keep_coming(rig):
    """With frames always waiting in the ring the iterator never needs the
    reader, and still gives the loop a turn between batches."""
    lab, gen = rig
    n, per_batch = 2000, 16  # all in the RX ring (2048) before reading starts
    ticker = LoopTicker()

    async def consume(xsk: XskSocket) -> list[int]:
        seen, got = [], 0
        async for batch in xsk.batches(per_batch):
            seen.append(ticker.ticks)
            got += len(batch)
            if got == n:
                return seen
        raise AssertionError("the iteration ended early")

    async def main():
        with open_xsk(lab) as xsk:
            await asyncio.to_thread(gen.send, tokens(lab).templates[0], n)
            consumer = asyncio.create_task(consume(xsk))
            ticking = asyncio.create_task(ticker.run_until(consumer))
            seen = await asyncio.wait_for(consumer, GUARD_S)
            await ticking
            return seen

    seen = asyncio.run(main())
    assert len(seen) >= n // per_batch
    assert all(b > a for a, b in zip(seen, seen[1:])), seen


def test_cancelling_the_task_removes_the_reader(rig):
    lab, gen = rig

    async def main():
        with open_xsk(lab) as xsk:
            fd = xsk.fileno()
            consumer = asyncio.create_task(count_frames(xsk, 1))
            await until_waiting(fd, consumer)
            consumer.cancel()
            with pytest.raises(asyncio.CancelledError):
                await consumer
            assert not registered(fd)
            loop = asyncio.get_running_loop()
            loop.add_reader(fd, lambda: None)  # the fd is free for anyone again
            assert loop.remove_reader(fd)
            # and the socket still works: a new iteration gets what comes
            again = asyncio.create_task(count_frames(xsk, 5))
            await until_waiting(fd, again)
            await asyncio.to_thread(gen.send, tokens(lab).templates[0], 5)
            return await asyncio.wait_for(again, GUARD_S)

    assert asyncio.run(main()) == 5


def test_break_removes_the_reader_and_closing_the_iterator_releases_the_batch(rig):
    """After `break` under aclosing() the batch kept by the iterator is
    released: every chunk of a 64-chunk socket takes a datagram again."""
    lab, gen = rig
    packet = tokens(lab).templates[0]

    async def main():
        with open_xsk(lab, frames=64) as xsk:
            fd = xsk.fileno()
            await asyncio.to_thread(gen.send, packet, 10)
            async with contextlib.aclosing(xsk.batches()) as batches:
                async for batch in batches:
                    assert len(batch) == 10
                    break
                assert not registered(fd)
            await asyncio.to_thread(gen.send, packet, 64)
            got = await asyncio.wait_for(count_frames(xsk, 64), GUARD_S)
            assert not registered(fd)
            return got, xsk.statistics().lost

    assert asyncio.run(main()) == (64, 0)


def test_closing_the_socket_ends_a_waiting_iteration(rig):
    lab, _ = rig

    async def main():
        xsk = open_xsk(lab)
        fd = xsk.fileno()
        consumer = asyncio.create_task(count_frames(xsk, 1))
        await until_waiting(fd, consumer)
        xsk.close()
        assert not registered(fd)  # gone before the fd was closed
        return await asyncio.wait_for(consumer, GUARD_S)  # ends, no exception

    assert asyncio.run(main()) == 0


def test_closing_the_socket_inside_the_loop_ends_it(rig):
    lab, gen = rig

    async def main():
        with open_xsk(lab) as xsk:
            await asyncio.to_thread(gen.send, tokens(lab).templates[0], 3)
            seen = []
            async for batch in xsk.batches():
                seen.append(len(batch))
                xsk.close()
            return seen

    assert asyncio.run(main()) == [3]


def test_a_second_waiter_on_one_socket_is_refused(rig):
    lab, gen = rig

    async def main():
        with open_xsk(lab) as xsk:
            first = asyncio.create_task(count_frames(xsk, 4))
            await until_waiting(xsk.fileno(), first)
            with pytest.raises(ZerolayerError, match="already waiting on the AF_XDP socket"):
                await count_frames(xsk, 1)
            # the first waiter was left alone and still gets its frames
            await asyncio.to_thread(gen.send, tokens(lab).templates[0], 4)
            return await asyncio.wait_for(first, GUARD_S)

    assert asyncio.run(main()) == 4


def test_a_batch_of_no_frames_is_refused(rig):
    lab, _ = rig
    with open_xsk(lab) as xsk, pytest.raises(ZerolayerError, match="at least 1 frame"):
        xsk.batches(0)
