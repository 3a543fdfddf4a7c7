# SPDX-License-Identifier: Apache-2.0
"""Change a running zerolayer's token ports, malformed policy, flow tracking
and forwarding by writing its pinned maps: no recompile, no reattach, no gap."""

from pyxdp.errors import ZerolayerError
from pyxdp.kernel.privileges import preflight
from pyxdp.xdp import egress, iface_lock, ownership
from pyxdp.xdp.maps import POLICIES, ZerolayerMaps


def update(ifname: str, netns: str | None = None, *, ports=None,
           on_malformed: str | None = None, flows: bool | None = None,
           forward: bool | None = None, wait_s: float = iface_lock.DEFAULT_WAIT_S) -> dict:
    """Apply what is given; return the configuration now in effect. Turning
    forwarding on fills the egress map anew first (interfaces made since the
    attach become ways out), so no datagram meets a stale map. It holds
    IFNAME's lock, waiting up to WAIT_S seconds, so what it reads and writes
    is what no other command is changing."""
    preflight("zerolayer config")
    if on_malformed is not None and on_malformed not in POLICIES:
        raise ZerolayerError(f"unknown policy {on_malformed!r}: use drop or pass")
    with iface_lock.held(ifname, netns, wait_s):
        ins = ownership.require_ours(ifname, netns)
        return _apply(ins.pin_dir, ifname, netns, ports, on_malformed, flows, forward)


def _apply(pin_dir: str, ifname: str, netns: str | None, ports, on_malformed: str | None,
           flows: bool | None, forward: bool | None) -> dict:
    with ZerolayerMaps.open_pinned(pin_dir) as maps:
        if ports:
            maps.set_ports(ports)
        if on_malformed:
            maps.set_on_malformed(on_malformed)
        if flows is not None:
            maps.set_flows_enabled(flows)
        if forward:
            egress.fill(maps["egress"].fd, netns)
        if forward is not None:
            maps.set_forward_enabled(forward)
        forwarding = maps.forward_enabled()
        ways_out = egress.names(maps["egress"].fd, netns)
        return {"interface": ifname, "netns": netns, "ports": maps.ports(),
                "on_malformed": maps.on_malformed(), "flow_tracking": maps.flows_enabled(),
                "forwarding": forwarding, "egress": ways_out,
                "forward_notes": egress.notes(ifname, netns, ways_out) if forwarding else []}
