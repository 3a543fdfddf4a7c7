# SPDX-License-Identifier: Apache-2.0
"""One observer run: the probes, the session feeding the tracker, new
TLS libraries picked up as processes start, until told to stop."""

import threading
import time
from collections.abc import Callable, Iterable

from pyxdp.kernel.signals import ClosedOnExit
from pyxdp.streams import libraries, probes, session
from pyxdp.streams.selection import Selection, cgroup_ids
from pyxdp.streams.tracker import StreamTracker
from pyxdp.streams.watchdog import Heartbeat

POLL_MS = 50  # the ring holds far more than 50 ms of events
SCAN_EVERY_S = 2.0  # new processes' libraries: "picked up within a few seconds"
FULL_SCAN_EVERY = 15  # every Nth scan reads every process again (a late dlopen)

# What the probes cannot see, said once on start (docs/spec.md §11.4).
NOT_SEEN = ("not seen: TLS of stacks that export no TLS function (Go crypto/tls; stripped "
            "static BoringSSL in Envoy, Bun; rustls), HTTP/2 connections older than the "
            "observer (their HPACK context is gone), compressed bodies (both are counted)")


def monotonic_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Watch(ClosedOnExit):
    """Streams of every process, or of those SELECTION takes (PIDS: a
    selection by pid alone)."""

    def __init__(self, pids: Iterable[int] = (), stall_ms: int = 1000, max_streams: int = 10000,
                 metrics=None, on_note: Callable[[str], None] | None = None,
                 selection: Selection | None = None):
        """ON_NOTE gets each line the probes have to say (a library refused,
        or probed only in the processes that map it), once, as it is found."""
        self.selection = selection or Selection(pids=tuple(pids))
        self._on_note = on_note
        self._noted = 0
        self.heartbeat = Heartbeat()  # beaten every turn of run(), for a watchdog
        self.tracker = StreamTracker(stall_ms=stall_ms, max_streams=max_streams, metrics=metrics)
        # under a selection, the first scan() below selects its processes
        everything = self.selection.everything
        only_pids = not everything and self.selection == Selection(pids=self.selection.pids)
        self.probes = probes.Probes((), max_conns=2 * max_streams, selective=not everything,
                                    per_process=only_pids, cgroups=bool(self.selection.cgroups))
        try:
            self.session = session.Session(self.probes, self.tracker, max_conns=2 * max_streams)
            self._seen: set[int] = set()
            self._scans = 0
            self.scan()
        except BaseException:
            self.probes.close()
            raise

    def scan(self) -> None:
        """Uprobes on the TLS libraries of processes not seen before (of
        all of them every FULL_SCAN_EVERY scans; under a selection, of the
        selected every time, as they may load OpenSSL late). Under a
        selection, the processes it takes now are added first (a port
        opened, an executable started), with the children the kernel
        added, and those ended are let go."""
        now = set(libraries.pids())
        if self.probes.selective:
            self._select(now)
        every = self._scans % FULL_SCAN_EVERY == 0 or self.probes.selective
        fresh = now if every else now - self._seen
        self._scans += 1
        self._seen = now
        self.probes.scan(fresh)
        notes = self.probes.notes
        if self._on_note:
            for line in notes[self._noted:]:
                self._on_note(line)
        self._noted = len(notes)

    def _select(self, now: set[int]) -> None:
        if self.selection.cgroups:  # a cgroup made below one selected
            self.probes.select_cgroups(cgroup_ids(self.selection.cgroups))
        watched = self.probes.watched_pids()
        self.probes.unselect(watched - now)
        # ports are opened by running processes, and a process may exec a
        # selected executable: all are looked at again, now and then
        again = self.selection.ports or self._scans % FULL_SCAN_EVERY == 0  # (an exec, too)
        fresh = now if again else now - self._seen
        self.probes.select(self.selection.matching(fresh) | (watched & now))

    def run(self, stop: threading.Event, emit: Callable[[dict], None], *,
            duration: float | None = None, count: int | None = None,
            tick: Callable[[], None] | None = None, tick_s: float = 1.0) -> int:
        """Feed the tracker until STOP is set, DURATION seconds have passed or
        COUNT streams have ended; EMIT gets each stream that ends, TICK is
        called every TICK_S seconds. Returns the streams emitted."""
        start = time.monotonic()
        next_scan = start + SCAN_EVERY_S
        next_tick = start + tick_s
        emitted = 0
        while not stop.is_set():
            self.heartbeat.beat("reading its ring")
            self.session.poll(POLL_MS)
            for stream in self.tracker.pop_finished():
                emit(stream)
                emitted += 1
                if count is not None and emitted >= count:
                    return emitted
            now = time.monotonic()
            if duration is not None and now - start >= duration:
                break
            if now >= next_scan:
                self.heartbeat.beat("scanning processes for TLS libraries")
                self.scan()
                next_scan = now + SCAN_EVERY_S
            if tick and now >= next_tick:
                tick()
                next_tick = now + tick_s
        return emitted

    def open_streams(self) -> list[dict]:
        return self.tracker.open_streams(monotonic_ns())

    def close(self) -> None:
        self.session.close()
        self.probes.close()
