# SPDX-License-Identifier: Apache-2.0
"""Detaching many BPF attachments at once. Each uprobe's perf event and
each tracepoint's link waits out an RCU grace period in the kernel as it
goes: closed one after another, the waits add up (2.2-3.8 s for the stream
observer's 16 uprobes and 19 tracepoints here); closed from threads, they
overlap (1.5 s). The system calls release the GIL."""

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

MAX_THREADS = 32


def run_all(jobs: Sequence[Callable[[], None]]) -> None:
    """Run every job of JOBS, at once; the first error, once all are done."""
    if len(jobs) < 2:
        for job in jobs:
            job()
        return
    with ThreadPoolExecutor(min(len(jobs), MAX_THREADS), thread_name_prefix="zl-detach") as pool:
        futures = [pool.submit(job) for job in jobs]
    for future in futures:
        future.result()  # the first error, raised
