# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C and SIGTERM, two ways: as an Event for long-running commands,
whose main thread waits on it and stops things in order rather than being
interrupted anywhere; and as an exception that unwinds `with` blocks, for
objects that must give kernel resources back on the way out."""

import contextlib
import ctypes
import signal
import threading

PR_SET_PDEATHSIG = 1


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


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised so that `with` blocks unwind as on Ctrl-C."""


def _raise_terminated(signum, frame):
    raise Terminated()


class ClosedOnExit:
    """Mixin for objects with close(): a `with` block closes them on the way
    out, on Ctrl-C and on SIGTERM too. While inside, SIGTERM raises
    Terminated in the main thread instead of killing the process, so sockets
    are unregistered on the way out; a SIGTERM handler someone else installed
    is left alone, and nested blocks leave it to the outermost."""

    _previous_sigterm = None

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.close()
        finally:
            if self._previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
                self._previous_sigterm = None


def die_with_parent() -> None:
    """A subprocess preexec_fn: the child gets SIGTERM when the thread that
    started it ends, however it ends (PR_SET_PDEATHSIG), so a process
    killed outright (SIGKILL, a test's timeout) leaves no helper running.
    Start such children from a thread that lives as long as they should."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
