# SPDX-License-Identifier: Apache-2.0
"""pyroute2's synchronous API runs an asyncio loop of its own, which cannot
run in a thread where one already runs (an asyncio program opening an
XskSocket). off_event_loop runs a function that uses it in a thread of its
own there, started from the caller's, so that it starts in the caller's
network namespace."""

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor


def off_event_loop(func):
    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return func(*args, **kwargs)
        with ThreadPoolExecutor(1, thread_name_prefix="netlink") as pool:
            return pool.submit(func, *args, **kwargs).result()
    return call
