"""Ctrl-C and SIGTERM as an Event, for long-running commands: the main
thread waits on it and stops things in order, rather than being interrupted
anywhere."""

import contextlib
import signal
import threading


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event | None = None):
    """Yield STOP (a new Event by default), set by SIGINT or SIGTERM while
    the block runs; the previous handlers are put back afterwards."""
    stop = stop or threading.Event()
    handler = lambda *_: stop.set()  # noqa: E731
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
