# SPDX-License-Identifier: Apache-2.0
"""Where else zerolayer is: hints for a command run without --netns.

zerolayer's pin tree (pins.ROOT) names the namespaces it is attached in, as
`zerolayer top` and the exporter find them (flows.pinned); a command that
looked only at the host says so, and which --netns to add.
"""

import contextlib
import socket

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns as netns_mod
from pyxdp.xdp import flows, pins


def pinned_in_namespaces(iface: str | None = None) -> dict[str, list[str]]:
    """Namespace -> the interfaces zerolayer has pins for there (only IFACE, if given)."""
    found: dict[str, list[str]] = {}
    for ns, name in flows.pinned():
        if ns is not None and iface in (None, name):
            found.setdefault(ns, []).append(name)
    return found


def namespaces_holding(iface: str) -> list[str]:
    """The namespaces with zerolayer pins that have an interface named IFACE."""
    holding = []
    for ns in pins.pinned_netns():
        try:
            with netns_mod.entered(ns):
                socket.if_nametoindex(iface)
        except (OSError, ZerolayerError):
            continue  # not there, or the namespace is gone
        holding.append(ns)
    return holding


@contextlib.contextmanager
def pointing_to_netns(iface: str | None, netns: str | None):
    """Run the block; if it fails and IFACE is not on the host but in a
    namespace zerolayer has pins in, the one-line error adds which --netns."""
    try:
        yield
    except ZerolayerError as exc:
        if netns is not None or iface is None or _on_the_host(iface):
            raise
        holding = namespaces_holding(iface)
        if not holding:
            raise
        flags = " or ".join(f"--netns {ns}" for ns in holding)
        raise ZerolayerError(f"{exc}; netns {', '.join(holding)} (where zerolayer has pins) "
                             f"has one: add {flags}") from None


def _on_the_host(iface: str) -> bool:
    try:
        socket.if_nametoindex(iface)
    except OSError:
        return False
    return True
