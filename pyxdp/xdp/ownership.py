# SPDX-License-Identifier: Apache-2.0
"""Who owns the XDP program on an interface, read from the kernel.

A program is zerolayer's when it uses the counters map pinned in the
interface's pin dir. That test needs no bookkeeping of our own, so it stays
true after a crash between attaching and pinning, and it can never mistake
another tool's program (or another zerolayer's, in another netns) for ours.
On an interface that runs libxdp's dispatcher the test is put to each
program in it (pyxdp.xdp.dispatcher), and the others are listed.
"""

import os
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.privileges import preflight
from pyxdp.xdp import dispatcher as dispatcher_mod
from pyxdp.xdp import netlink, parsers, pins
from pyxdp.xdp.maps import ZerolayerMaps

ZEROLAYER = "zerolayer"
FOREIGN = "foreign"


@dataclass(frozen=True)
class Inspection:
    state: netlink.XdpState
    netns: str | None
    pin_dir: str
    pinned: bool  # the pin dir exists
    owner: str | None  # ZEROLAYER, FOREIGN, or None when no program is attached
    # the program attached; in a dispatcher, zerolayer's there (else the dispatcher)
    program: bpfsys.ProgInfo | None
    dispatcher: dispatcher_mod.Dispatcher | None = None  # libxdp's, when it runs there

    @property
    def ours(self) -> bool:
        return self.owner == ZEROLAYER

    @property
    def stale_pins(self) -> bool:
        """Pins left by a zerolayer program that is no longer attached here."""
        return self.pinned and not self.ours


def _pinned_counters_id(pin_dir: str) -> int | None:
    try:
        fd = bpfsys.obj_get(os.path.join(pin_dir, "counters"))
    except OSError:
        return None
    try:
        return bpfsys.map_info(fd).id
    finally:
        os.close(fd)


def program_fd(prog_id: int) -> int:
    """An fd of program PROG_ID (raises FileNotFoundError once it is freed),
    or a one-line error when reading it is not allowed."""
    try:
        return bpfsys.prog_fd_by_id(prog_id)
    except PermissionError as exc:
        raise ZerolayerError(
            f"cannot read XDP program {prog_id} (BPF_PROG_GET_FD_BY_ID: {exc.strerror}): "
            "it needs CAP_SYS_ADMIN (run as root, or give the service that capability)"
        ) from None


def _program_info(prog_id: int) -> bpfsys.ProgInfo | None:
    try:
        fd = program_fd(prog_id)
    except FileNotFoundError:  # detached and freed since we asked
        return None
    try:
        return bpfsys.prog_info(fd)
    finally:
        os.close(fd)


def inspect_state(state: netlink.XdpState, netns: str | None) -> Inspection:
    pin_dir = pins.pin_dir(state.ifname, netns)
    pinned = pins.has_pin_dir(state.ifname, netns)  # the tree checked to be root's
    program = _program_info(state.prog_id) if state.prog_id else None
    disp = None
    if program is not None and program.name == dispatcher_mod.DISPATCHER_NAME:
        disp = dispatcher_mod.read(state.ifindex, netns)
    owner = None
    if program is not None:
        counters_id = _pinned_counters_id(pin_dir) if pinned else None
        candidates = [program] if disp is None else [
            info for info in map(_program_info, (m.id for m in disp.members)) if info]
        ours = next((p for p in candidates if counters_id in p.map_ids), None)
        owner = ZEROLAYER if ours else FOREIGN
        program = ours or program
    return Inspection(state, netns, pin_dir, pinned, owner, program, disp)


def inspect(ifname: str, netns: str | None = None) -> Inspection:
    return inspect_state(netlink.query(ifname, netns), netns)


def not_attached(ifname: str, netns: str | None) -> ZerolayerError:
    where = f" --netns {netns}" if netns else ""
    return ZerolayerError(
        f"zerolayer is not attached to {ifname}: run `zerolayer attach {ifname}{where}` first")


def require_ours(ifname: str, netns: str | None = None) -> Inspection:
    """The inspection of IFNAME, or a one-line error if zerolayer's program
    is not the one attached there."""
    ins = inspect(ifname, netns)
    if not ins.ours:
        raise not_attached(ifname, netns)
    return ins


def parser(ins: Inspection) -> str | None:
    """The parser variant of zerolayer's attached program (None when not ours)."""
    return parsers.of_program(ins.program.name) if ins.ours and ins.program else None


def describe(ins: Inspection) -> dict:
    """One interface for `zerolayer status --json`."""
    out = {
        "interface": ins.state.ifname,
        "netns": ins.netns,
        "ifindex": ins.state.ifindex,
        "mode": ins.state.mode,
        "program_id": ins.program.id if ins.program else ins.state.prog_id,
        "program_name": ins.program.name if ins.program else None,
        "owner": ins.owner,
        "pin_dir": ins.pin_dir if ins.pinned else None,
        "stale_pins": ins.stale_pins,
        "rx_queues": ins.state.rx_queues,
        "dispatcher": members(ins),
    }
    if ins.ours:
        out["parser"] = parser(ins)
        with ZerolayerMaps.open_pinned(ins.pin_dir) as maps:
            out["ports"] = maps.ports()
            out["on_malformed"] = maps.on_malformed()
            out["flow_tracking"] = maps.flows_enabled()
            out["forwarding"] = maps.forward_enabled()
    return out


def members(ins: Inspection) -> list[dict] | None:
    """libxdp's dispatcher's programs, in the order they run (None: none)."""
    if ins.dispatcher is None:
        return None
    ours = ins.program.id if ins.ours and ins.program else None
    return [{"name": m.name, "program_id": m.id, "priority": m.priority,
             "owner": ZEROLAYER if m.id == ours else FOREIGN} for m in ins.dispatcher.members]


def status(ifname: str | None = None, netns: str | None = None) -> list[dict]:
    """Every interface of NETNS (or just IFNAME), plus pin dirs whose
    interface no longer exists."""
    preflight("zerolayer status")
    # A namespace that is gone still shows its pins, all stale.
    ns_gone = netns is not None and not netns_mod.exists(netns) and bool(
        pins.pinned_interfaces(netns))
    if ifname and not (ns_gone and pins.has_pin_dir(ifname, netns)):
        return [describe(inspect(ifname, netns))]
    states = [] if ns_gone else netlink.query_all(netns)
    rows = [describe(inspect_state(s, netns)) for s in states]
    present = {s.ifname for s in states}
    for gone in pins.pinned_interfaces(netns):
        if gone not in present and ifname in (None, gone):
            rows.append({
                "interface": gone, "netns": netns, "ifindex": None, "mode": None,
                "program_id": None, "program_name": None, "owner": None,
                "pin_dir": pins.pin_dir(gone, netns), "stale_pins": True,
                "rx_queues": None, "dispatcher": None,
            })
    return rows
