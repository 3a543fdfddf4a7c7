# SPDX-License-Identifier: Apache-2.0
"""A task that counts the turns the event loop gives it: the evidence that
the loop keeps running other tasks while an AF_XDP consumer waits or reads."""

import asyncio


class LoopTicker:
    def __init__(self) -> None:
        self.ticks = 0

    async def run_until(self, task: asyncio.Task) -> None:
        """Take turn after turn, counting them, until TASK is done."""
        while not task.done():
            self.ticks += 1
            await asyncio.sleep(0)
