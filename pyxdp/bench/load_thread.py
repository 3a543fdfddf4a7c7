# SPDX-License-Identifier: Apache-2.0
"""Traffic from a background thread while the calling thread measures.

A measurement reads counters while the load flows. If the thread driving
the generator dies, those counters stop moving and a measurement that does
not look would report 0 frames/s as a result. So the load's failure is kept
and raised in the measuring thread by check() (and on leaving the `with`
block), as a ZerolayerError that names the cause and chains it.
"""

import os
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from pyxdp.errors import ZerolayerError

T = TypeVar("T")


class LoadThread(Generic[T]):
    """Run LOAD(stop) in a daemon thread named NAME, pinned to CPU if given.
    LOAD should return soon after `stop` is set (a load that ends by itself
    may ignore it); what it returns is `result`."""

    def __init__(self, name: str, load: Callable[[threading.Event], T], *,
                 cpu: int | None = None):
        self.name = name
        self.stop = threading.Event()
        self.done = threading.Event()  # set when LOAD has returned or raised
        self.result: T | None = None
        self.elapsed_s = 0.0
        self._load, self._cpu = load, cpu
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        try:
            if self._cpu is not None:
                os.sched_setaffinity(0, {self._cpu})  # this thread only
            self.result = self._load(self.stop)
        except BaseException as exc:  # raised again in the measuring thread by check()
            self._failure = exc
        finally:
            self.elapsed_s = time.monotonic() - start
            self.done.set()

    def check(self) -> None:
        """Raise the load's failure, if it failed."""
        exc = self._failure
        if exc is not None:
            raise ZerolayerError(f"{self.name} failed: {str(exc) or type(exc).__name__}") from exc

    def __enter__(self) -> "LoadThread[T]":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self._thread.join()
        if exc[0] is None:  # an exception already on its way out wins
            self.check()


def flat_out(gen, mix, chunk: int) -> "LoadThread[int]":
    """The generator flat out, CHUNK frames a call, until stopped, in a
    thread pinned to the first CPU this process may use (on veth the
    receiver's work runs there too, so it stays on one CPU); its result is
    the frames it sent."""
    def load(stop: threading.Event) -> int:
        sent = 0
        while not stop.is_set():
            sent += gen.run(mix, chunk).sent
        return sent
    cpus = sorted(os.sched_getaffinity(0))
    return LoadThread("the generator thread", load, cpu=cpus[0] if len(cpus) > 1 else None)
