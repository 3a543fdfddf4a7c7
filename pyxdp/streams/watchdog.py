# SPDX-License-Identifier: Apache-2.0
"""The stream observer's watchdog (docs/spec.md §11.5): its loop beats a
heartbeat every turn; a thread of its own checks the beat each second and
says once when the loop has stood still for more than STALE_AFTER_S, and
once when it runs again. A scrape reads the beat's age itself, so
`/metrics` tells the truth even between the watchdog's checks."""

import threading
import time
from collections.abc import Callable

STALE_AFTER_S = 5.0  # a turn is 50 ms of polling; a scan of every process, well under 5 s
CHECK_EVERY_S = 1.0


class Heartbeat:
    """When the observer's loop last came round, and what it was doing then."""

    def __init__(self) -> None:
        self.at = time.monotonic()
        self.doing = "starting"

    def beat(self, doing: str) -> None:
        # Two plain stores: a reader in another thread sees one or the other whole.
        self.at = time.monotonic()
        self.doing = doing

    def age(self) -> float:
        return max(0.0, time.monotonic() - self.at)


class Watchdog:
    """Watches HEARTBEAT while ALIVE() is true; LOG gets the stall and the
    recovery lines. ALIVE false (the observer's thread ended) is stale for good."""

    def __init__(self, heartbeat: Heartbeat, alive: Callable[[], bool],
                 log: Callable[[str], None], stale_after_s: float = STALE_AFTER_S) -> None:
        self._heartbeat = heartbeat
        self._alive = alive
        self._log = log
        self._after = stale_after_s
        self._stop = threading.Event()
        self._stalled_since: float | None = None  # the beat's time when the stall was said
        self._thread = threading.Thread(target=self._run, name="zerolayer-streams-watchdog",
                                        daemon=True)
        self._thread.start()

    def health(self) -> tuple[float, bool]:
        """(seconds since the last beat, whether the streams' figures are stale)."""
        age = self._heartbeat.age()
        return age, age > self._after or not self._alive()

    def _run(self) -> None:
        while not self._stop.wait(CHECK_EVERY_S):
            if not self._alive():
                return  # the observer said why it stopped; the gauge stays 1
            age = self._heartbeat.age()
            if self._stalled_since is None and age > self._after:
                self._stalled_since = self._heartbeat.at
                self._log(f"the token-stream observer has not come round its loop for "
                          f"{age:.1f} s (it was {self._heartbeat.doing}): the streams' figures "
                          f"are stale (zerolayer_streams_stale 1) until it does")
            elif self._stalled_since is not None and self._heartbeat.at != self._stalled_since \
                    and age <= self._after:
                stood = self._heartbeat.at - self._stalled_since
                self._stalled_since = None
                self._log(f"the token-stream observer runs again after standing still for "
                          f"{stood:.1f} s; what its ring held meanwhile is read now, what the ring "
                          f"could not hold is counted lost")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * CHECK_EVERY_S)
