# SPDX-License-Identifier: Apache-2.0
"""An interface's own packet counters (IFLA_STATS64, what `ip -s link`
prints), read with rtnetlink inside a network namespace: what a sender
reports next to its socket's counts, since a frame the kernel completed
may still have been dropped by the device."""

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns as netns_mod

FIELDS = ("tx_packets", "tx_dropped", "tx_errors")


def read(ifname: str, netns: str | None = None) -> dict[str, int]:
    """FIELDS of IFNAME's counters."""
    from pyroute2 import IPRoute

    with netns_mod.entered(netns), IPRoute() as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise ZerolayerError(f"no interface named {ifname!r} (see `ip link show`)")
        stats = ipr.get_links(found[0])[0].get_attr("IFLA_STATS64")
    return {name: int(stats[name]) if stats is not None else 0 for name in FIELDS}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before[name] for name in FIELDS}
