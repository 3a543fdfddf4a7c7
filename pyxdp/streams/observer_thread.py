# SPDX-License-Identifier: Apache-2.0
"""The stream observer as the exporter runs it (docs/spec.md §11.5): in a
thread of its own beside the HTTP server, with a watchdog, its metrics
served at each scrape."""

import threading

from pyxdp.streams.metrics import StreamMetrics
from pyxdp.streams.otlp import OtlpPusher
from pyxdp.streams.selection import Selection, cgroup_dir
from pyxdp.streams.watch import NOT_SEEN, Watch
from pyxdp.streams.watchdog import Watchdog


class ObserverThread:
    """The token-stream observer behind `exporter --streams`: its probes load here
    (a compile; a failure is the command's, before anything is served), its
    loop runs in a thread until close(), watched by a watchdog whose
    verdict every scrape carries (zerolayer_streams_stale)."""

    THREAD_COMM = "zl-streams"  # what `top -H` and /proc/PID/task/*/comm show

    def __init__(self, options, log) -> None:
        self.metrics = StreamMetrics(counters=self._counters, health=self._health)
        selection = Selection(ports=options.ports, exes=options.exes,
                              cgroups=tuple(cgroup_dir(c) for c in options.cgroups))
        self._watch = Watch(stall_ms=options.stall_ms, max_streams=options.max_streams,
                            metrics=self.metrics, on_note=log, selection=selection)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zerolayer-streams", daemon=True)
        self._log = log
        self._thread.start()
        self._watchdog = Watchdog(self._watch.heartbeat, self._thread.is_alive, log)
        self.otlp = None
        if options.otlp is not None:
            try:
                self.otlp = OtlpPusher(self.metrics, options.otlp, log)
            except BaseException:
                self.close()
                raise
            log(f"pushing the streams' metrics over OTLP to {options.otlp.url} every "
                f"{options.otlp.interval_s:g} s ({options.otlp.temporality})")
        log(f"observing token streams of {selection.describe()}; {NOT_SEEN}")

    def collectors(self) -> list:
        """What a scrape reads of it: the streams' metrics, and the OTLP
        export's counts when it pushes."""
        return [self.metrics.collector()] + ([self.otlp.collector()] if self.otlp else [])

    def _counters(self) -> dict:
        """The tracker's counters, read at a scrape."""
        return self._watch.tracker.counters

    def _health(self) -> tuple[float, bool]:
        return self._watchdog.health()

    def _run(self) -> None:
        _name_this_thread(self.THREAD_COMM)
        try:
            self._watch.run(self._stop, emit=lambda _stream: None)
        except Exception as exc:  # the metrics stop growing; the exporter says why, once
            self._log(f"the token-stream observer stopped: {exc}")

    def close(self) -> None:
        self._stop.set()
        self._watchdog.close()
        self._thread.join(timeout=5)
        if self.otlp is not None:
            self.otlp.close()  # the last figures, flushed for at most a second
        self._watch.close()


def _name_this_thread(comm: str) -> None:
    """Give the calling thread a kernel name, so a stuck observer can be
    told apart from the HTTP server's threads (best effort)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(comm)
    except OSError:
        pass
