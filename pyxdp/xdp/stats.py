# SPDX-License-Identifier: Apache-2.0
"""Counters of an attached zerolayer, read from its pins (no compile), and
per-interval rates as xdp-bench prints them."""

import time

from pyxdp.errors import ZerolayerError
from pyxdp.kernel.privileges import preflight
from pyxdp.proto import counters
from pyxdp.xdp import ownership
from pyxdp.xdp.maps import ZerolayerMaps


def open_pinned(ifname: str, netns: str | None) -> tuple[ownership.Inspection, ZerolayerMaps]:
    """IFNAME's inspection and its pinned maps (the caller closes them);
    stale pins are fine, no pins is a one-line error."""
    preflight("zerolayer stats")
    ins = ownership.inspect(ifname, netns)
    if not ins.pinned:  # stale pins still have counters worth reading
        raise ownership.not_attached(ifname, netns)
    return ins, ZerolayerMaps.open_pinned(ins.pin_dir)


def snapshot(ins: ownership.Inspection, flat: dict[str, int]) -> dict:
    return {
        "interface": ins.state.ifname,
        "netns": ins.netns,
        "mode": ins.state.mode if ins.ours else None,
        "program_id": ins.program.id if ins.ours and ins.program else None,
        "parser": ownership.parser(ins),
        "attached": ins.ours,
        "counters": counters.nest(flat),
    }


def read(ifname: str, netns: str | None = None) -> dict:
    """The `zerolayer stats --json` object."""
    ins, maps = open_pinned(ifname, netns)
    with maps:
        return snapshot(ins, maps.read_counters())


def watch(ifname: str, netns: str | None = None, interval: float = 1.0):
    """Yield a snapshot every INTERVAL seconds, with "rates": per-second
    deltas over the interval actually elapsed."""
    if interval <= 0:
        raise ZerolayerError("--watch needs a positive number of seconds")
    ins, maps = open_pinned(ifname, netns)
    with maps:
        before, t0 = maps.read_counters(), time.monotonic()
        while True:
            time.sleep(interval)
            after, t1 = maps.read_counters(), time.monotonic()
            elapsed = t1 - t0
            snap = snapshot(ins, after)
            snap["interval_s"] = round(elapsed, 3)
            snap["rates"] = counters.nest(
                {k: round(v / elapsed, 1) for k, v in counters.delta(after, before).items()}
            )
            yield snap
            before, t0 = after, t1
