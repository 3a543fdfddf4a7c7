# SPDX-License-Identifier: Apache-2.0
"""`zerolayer apply --watch`: converge, then converge again whenever a link
appears, vanishes or is renamed (rtnetlink link events, in the host's
namespace and each one in scope), when the file changes (and has stayed
as it is for a tick, so a half-written file is not read), and on SIGHUP;
stop on SIGTERM or SIGINT (docs/spec.md §10.6).

A file that no longer parses, or is refused (pyxdp.trusted_file: a FIFO,
a link to a device, writable by others...), keeps the last good
configuration and logs one line (once for each version of the file,
SIGHUP or not). A namespace in scope that is deleted is seen at the next
tick: its rtnetlink socket, which would keep it alive, is closed, and a
pass runs. Every action that is not `ok` is logged, one line each; a line
identical to one logged in the pass before is not repeated. A pass that
left the host not matching is tried again after RETRY_S, or at the next
event.
"""

import os
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.signals import stop_on_signals
from pyxdp.service import apply, config, plan
from pyxdp.xdp import loader, ownership

TICK_S = 0.25  # how often the file, the namespaces and the signals are looked at
SETTLE_S = 0.1  # events within this of each other make one pass
RETRY_S = 30.0


def _file_id(path: str) -> tuple | None:
    """What tells a version of the file from another. Its mode, owner and
    ctime too: a file refused as writable by others, then fixed with chmod,
    is read again (stat, not open: a FIFO or a device is not opened here)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode,
            st.st_uid)


def _netns_id(netns: str | None) -> int | None:
    if netns is None:
        return 0
    try:
        return os.stat(netns_mod.path(netns)).st_ino
    except OSError:
        return None


class _LinkEvents:
    """One rtnetlink socket per namespace, subscribed to link events. A
    namespace made (or made again) after the start is picked up at the next
    refresh, which counts as an event."""

    def __init__(self):
        self.sockets: dict[str | None, tuple[int, Any]] = {}  # netns -> (its inode, IPRoute)

    def refresh(self, namespaces: set[str | None]) -> bool:
        changed = False
        for netns in list(self.sockets):
            if netns not in namespaces or _netns_id(netns) != self.sockets[netns][0]:
                self._close(netns)
                changed = True
        for netns in namespaces - set(self.sockets):
            ident = _netns_id(netns)
            if ident is None:
                continue
            from pyroute2 import IPRoute
            from pyroute2.netlink.rtnl import RTMGRP_LINK

            with netns_mod.entered(netns):
                ipr = IPRoute()
            ipr.bind(groups=RTMGRP_LINK)
            self.sockets[netns] = (ident, ipr)
            changed = True
        return changed

    def wait(self, timeout: float) -> bool:
        """Whether a link event came within TIMEOUT (the events read, and
        those that follow within SETTLE_S)."""
        got = False
        while True:
            ready, _, _ = select.select([s for _, s in self.sockets.values()], [], [], timeout)
            if not ready:
                return got
            for ipr in ready:
                ipr.get()
            got, timeout = True, SETTLE_S

    def _close(self, netns: str | None) -> None:
        _, ipr = self.sockets.pop(netns)
        ipr.close()

    def close(self) -> None:
        for netns in list(self.sockets):
            self._close(netns)


class Watch:
    def __init__(self, start: config.Config, prune: bool, wait_s: float,
                 log: Callable[[str], None]):
        self.path = start.path
        self.prune = prune
        self.wait_s = wait_s
        self.log = log
        self.config = start
        self.file_id = _file_id(self.path)
        self.scope = plan.scope_of(self.config)
        self.last_lines: set[str] = set()
        self.reload = False
        self.broken: tuple | None = None  # (file id, error) last logged for a bad file
        self.changing: tuple | None = None  # the file's id when a change was seen, a tick ago

    def run(self) -> None:
        events = _LinkEvents()
        previous_hup = signal.signal(signal.SIGHUP, self._on_hup)
        try:
            with stop_on_signals() as stop:
                self.log(f"watching {self.path}")
                due: float | None = 0.0  # when to converge next (None: at the next event)
                while not stop.is_set():
                    if events.refresh(self.scope | self.config.namespaces()):
                        due = 0.0
                    wait = TICK_S if due is None else max(0.0, min(TICK_S, due - time.monotonic()))
                    if events.wait(wait):
                        due = 0.0
                    if self._reloaded():
                        due = 0.0
                    if due is not None and time.monotonic() >= due and not stop.is_set():
                        due = None if self._converge(stop) else time.monotonic() + RETRY_S
                if self.config.detach_on_stop:
                    self._detach_all()
                self.log("stopped")
        finally:
            events.close()
            signal.signal(signal.SIGHUP, previous_hup)

    def _on_hup(self, *_) -> None:
        self.reload = True

    def _reloaded(self) -> bool:
        """Read the file again if it changed or SIGHUP asked; whether there
        is a new configuration to converge to."""
        now = _file_id(self.path)
        if not self.reload:
            if now == self.file_id:
                return False
            if now != self.changing:  # changed since the last tick: may be half-written
                self.changing = now
                return False
        self.reload, self.file_id, self.changing = False, now, None
        try:
            self.config = config.load(self.path)
        except ZerolayerError as exc:
            if self.broken != (now, str(exc)):  # once per version of the file
                self.log(f"{exc}; keeping the last good configuration")
            self.broken = (now, str(exc))
            return False
        self.broken = None
        self.scope |= plan.scope_of(self.config)  # what it named before may need pruning
        self.log(f"reloaded {self.path}")
        return True

    def _converge(self, stop: threading.Event) -> bool:
        """One pass, each action logged as it ends; whether the host
        matches the file after it. STOP (SIGTERM) ends it between actions."""
        said: set[str] = set()

        def tell(outcome: apply.Outcome) -> None:
            if outcome.status != apply.OK:
                self._say({apply.describe(outcome)}, said)

        try:
            report = apply.converge(self.config, prune=self.prune, wait_s=self.wait_s,
                                    scope=self.scope, on_outcome=tell, stop=stop)
        except ZerolayerError as exc:
            self._say({f"apply: failed: {exc}"}, said)
            report = None
        if report is not None:
            self._say(set(self.config.unmatched([o.action.want for o in report.outcomes])), said)
        self.last_lines = said
        return report is not None and report.matched

    def _say(self, lines: set[str], said: set[str]) -> None:
        """Log LINES but those logged in the pass before or in this one (SAID)."""
        for line in sorted(lines - self.last_lines - said):
            self.log(line)
        said |= lines

    def _detach_all(self) -> None:
        """[service] detach_on_stop: detach zerolayer from every interface
        the file resolves to."""
        try:
            observed = apply.observe(self.config, set())
        except ZerolayerError as exc:
            self.log(f"detach on stop: failed: {exc}")
            return
        resolved, _ = plan.resolve(self.config, observed)
        for _, link in resolved:
            if link.owner != ownership.ZEROLAYER:
                continue
            where = f" (netns {link.netns})" if link.netns else ""
            try:
                loader.detach(link.name, link.netns, wait_s=self.wait_s)
                self.log(f"detach {link.name}{where}: done: detach_on_stop")
            except ZerolayerError as exc:
                self.log(f"detach {link.name}{where}: failed: {exc}")


def watch(start: config.Config, *, prune: bool, wait_s: float,
          log: Callable[[str], None]) -> None:
    """Converge to START, then watch its file, until SIGTERM or SIGINT."""
    Watch(start, prune, wait_s, log).run()
