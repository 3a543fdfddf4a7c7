# SPDX-License-Identifier: Apache-2.0
"""attach and detach: build, load, configure, attach, pin.

The order matters. Each command holds the interface's lock throughout
(iface_lock.py). On a first attach the maps are made and pinned first (the
object loaded without its program), and the configuration is written into
them before any program is attached, so it never sees an empty port set;
then libxdp
attaches it (pyxdp.xdp.dispatcher): into the dispatcher on the interface,
or one it makes, or alone where the kernel cannot run one. An upgrade
reuses the pinned maps (counters, configuration, AF_XDP registrations carry
over) and only then writes what was given. Alone on the interface, it swaps
programs with one netlink call that names the program it replaces; in a
dispatcher, the new program joins idle beside the old one, a config write
makes it the one that acts (its generation, docs/spec.md §6.4), and the
old one leaves: every datagram is judged and counted once.
"""

import contextlib
import errno
import os
from dataclasses import asdict, dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpffs, bpfsys
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.privileges import preflight
from pyxdp.proto import frames
from pyxdp.xdp import compiler, dispatcher, egress, iface_lock, netlink, ownership, parsers, pins
from pyxdp.xdp.maps import GENERATIONS, POLICIES, ZerolayerMaps, check_ports

MODES = ("auto", "native", "skb")


@dataclass(frozen=True)
class AttachResult:
    interface: str
    netns: str | None
    action: str  # attached, upgraded, replaced
    mode: str  # the mode in effect, read back from the kernel
    requested_mode: str
    program_id: int
    parser: str | None  # the parser variant attached (pyxdp.xdp.parsers), by its program's name
    pin_dir: str
    ports: list[int]
    on_malformed: str
    flow_tracking: bool
    forwarding: bool
    egress: list[str]  # the interfaces forwarded datagrams may leave by
    note: str | None  # e.g. why native mode was not used
    forward_notes: list[str]  # with forwarding on: what stops it, one line each
    # libxdp's dispatcher, when zerolayer runs in one: its programs (ownership)
    dispatcher: list[dict] | None = None
    priority: int | None = None  # zerolayer's in it

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DetachResult:
    interface: str
    netns: str | None
    action: str  # detached, removed_stale_pins
    program_id: int | None
    note: str | None

    def to_json(self) -> dict:
        return asdict(self)


def _foreign_removal(ifname: str, mode: str | None, netns: str | None) -> str:
    """How to remove another tool's program, which zerolayer never detaches."""
    ip = f"ip -n {netns}" if netns else "ip"
    xdp = {"skb": "xdpgeneric", "native": "xdpdrv"}.get(mode or "", "xdp")
    unload = (f"`ip netns exec {netns} xdp-loader unload {ifname} --all`" if netns
              else f"`xdp-loader unload {ifname} --all`")
    return f"its own tool ({unload} or `{ip} link set dev {ifname} {xdp} off`)"


def _modes_to_try(ifname: str, requested: str, current: str | None, ours: bool,
                  netns: str | None) -> list[str]:
    if current is None:
        return ["native", "skb"] if requested == "auto" else [requested]
    if current not in ("native", "skb"):
        raise ZerolayerError(f"{ifname} has XDP attached in {current} mode, which zerolayer does not manage")
    if requested not in ("auto", current):
        where = f" --netns {netns}" if netns else ""
        how = f"`zerolayer detach {ifname}{where}`" if ours else _foreign_removal(
            ifname, current, netns)
        raise ZerolayerError(
            f"{ifname} runs XDP in {current} mode; to move to {requested} mode, "
            f"detach first with {how} (the kernel cannot swap modes in one step)"
        )
    return [current]


def _attach(ifname: str, ins: ownership.Inspection, prog_fd: int, modes: list[str],
            expected_fd: int | None) -> str | None:
    """Try MODES in order; return a note when one was skipped."""
    note = None
    for i, mode in enumerate(modes):
        try:
            netlink.set_program(ins.state.ifindex, prog_fd, mode,
                               expected_fd=expected_fd, netns=ins.netns)
            return note
        except OSError as exc:
            last = i == len(modes) - 1
            if mode == "native" and not last and exc.errno in netlink.NATIVE_UNSUPPORTED:
                note = f"native mode unavailable ({exc.strerror}): using skb mode"
                continue
            if exc.errno == errno.EBUSY:
                raise ZerolayerError(
                    f"another XDP program appeared on {ifname} while attaching; nothing was changed"
                ) from None
            if exc.errno == errno.EEXIST:
                raise ZerolayerError(
                    f"the XDP program on {ifname} changed while attaching; nothing was replaced: try again"
                ) from None
            hint = "; try --mode skb" if mode == "native" else ""
            raise ZerolayerError(
                f"attaching to {ifname} in {mode} mode failed: {exc.strerror}{hint}"
            ) from None
    return note


def _pin_program(prog_fd: int, pin_dir: str) -> None:
    """Replace pin_dir/prog in one rename, so the pin is never missing."""
    staging = os.path.join(pin_dir, pins.PROG_STAGING)  # pin_dir: checked to be root's
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staging)
    bpfsys.obj_pin(prog_fd, staging)
    os.replace(staging, os.path.join(pin_dir, pins.PROG))


def attach(ifname: str, *, mode: str = "auto", ports=None, on_malformed: str | None = None,
           flows: bool | None = None, forward: bool | None = None, replace: bool = False,
           netns: str | None = None, wait_s: float = iface_lock.DEFAULT_WAIT_S,
           priority: int | None = None) -> AttachResult:
    """Attach zerolayer to IFNAME, or upgrade it in place if it runs there.

    PORTS, ON_MALFORMED, FLOWS and FORWARD default to 9977, drop, off and
    off on a first attach; on an upgrade, options not given keep their
    current values. The egress map is filled anew either way. PRIORITY is
    the program's place in libxdp's dispatcher (dispatcher.DEFAULT_PRIORITY,
    or the current one on an upgrade, unless given). The whole command
    holds IFNAME's lock, waiting up to WAIT_S seconds for it."""
    preflight("zerolayer attach")
    if mode not in MODES:
        raise ZerolayerError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if on_malformed is not None and on_malformed not in POLICIES:
        raise ZerolayerError(f"unknown policy {on_malformed!r}: use drop or pass")
    if ports is not None:
        ports = sorted(set(ports))
        check_ports(ports)
    if priority is not None and not 0 <= priority <= dispatcher.MAX_PRIORITY:
        raise ZerolayerError(
            f"priority {priority}: use 0 to {dispatcher.MAX_PRIORITY} (lower runs first)")
    with iface_lock.held(ifname, netns, wait_s):
        bpffs.require_writable("zerolayer attach")
        return _attach_locked(ifname, mode, ports, on_malformed, flows, forward, replace, netns,
                              priority)


def _configure(maps: ZerolayerMaps, fresh: bool, ports, on_malformed: str | None,
               flows: bool | None, forward: bool | None, netns: str | None) -> list[str]:
    """Write what was given (everything, on a fresh attach); return the
    egress interfaces, filled anew."""
    if fresh or on_malformed is not None:
        maps.set_on_malformed(on_malformed or "drop")
    if fresh or ports is not None:
        maps.set_ports(ports or [frames.DEFAULT_PORT])
    if fresh or flows is not None:
        maps.set_flows_enabled(bool(flows))
    egress_names = egress.fill(maps["egress"].fd, netns)
    if fresh or forward is not None:
        maps.set_forward_enabled(bool(forward))
    return egress_names


def _attach_locked(ifname: str, mode: str, ports, on_malformed: str | None,
                   flows: bool | None, forward: bool | None, replace: bool,
                   netns: str | None, priority: int | None) -> AttachResult:
    ins = ownership.inspect(ifname, netns)
    if ins.owner == ownership.FOREIGN and ins.dispatcher is None and not replace:
        prog = ins.program
        assert prog is not None  # a foreign owner is a program we could read
        raise ZerolayerError(
            f"{ifname} already runs XDP program '{prog.name}' (id {prog.id}, {ins.state.mode} mode) "
            f"that zerolayer did not load, outside libxdp's dispatcher: remove it with "
            f"{_foreign_removal(ifname, ins.state.mode, netns)}, or pass --replace"
        )
    modes = _modes_to_try(ifname, mode, ins.state.mode if ins.owner else None, ins.ours, netns)
    if ins.stale_pins:
        pins.remove_pins(ifname, netns)  # left by a program no longer attached
    # libxdp joins a dispatcher, or makes one on a bare interface; a program
    # alone (ours, or another's given --replace) is swapped in one step.
    through_libxdp = ins.dispatcher is not None or ins.program is None
    if ins.ours:
        action = "upgraded"
    elif ins.program is None or ins.dispatcher is not None:
        action = "attached"
    else:
        action = "replaced"
    fresh = not ins.ours
    if priority is None:
        current = _member_priority(ins)
        priority = dispatcher.DEFAULT_PRIORITY if current is None else current

    # The program that acts is the one of the config's generation: an
    # upgrade inside the dispatcher joins as the next one, idle beside the
    # old until the config names it (spec §6.4); elsewhere it takes the
    # current one, as the swap is one step.
    generation = _current_generation(ins) if ins.ours else 0
    if through_libxdp and ins.ours:
        generation = (generation + 1) % GENERATIONS
    expected_fd = None if through_libxdp or not ins.program else bpfsys.prog_fd_by_id(ins.program.id)
    pins.ensure_pin_dir(ifname, netns)  # root's, checked, before libbpf pins into it
    loaded, map_fds = None, {}
    try:
        # For libxdp, which loads the program itself, the maps alone, made
        # (or reused) first, so a fresh attach configures them before any
        # program of ours runs.
        if through_libxdp:
            map_fds = compiler.make_token_maps(ins.pin_dir)
        else:
            loaded = compiler.load_token(ins.pin_dir, generation)
            map_fds = loaded.map_fds
        with ZerolayerMaps.from_fds(map_fds) as maps:
            # Fresh maps are filled before the program is attached, so it never
            # sees an empty set; an upgrade's new values are written once the
            # swap has succeeded, so a failed one changes nothing.
            if fresh:
                egress_names = _configure(maps, True, ports, on_malformed, flows, forward, netns)
            if through_libxdp:
                note = _through_libxdp(ifname, ins, modes, priority, generation)
                if ins.ours and ins.program is not None:  # the old one, in the dispatcher
                    maps.set_generation(generation)  # one write: the new one acts
                    _leave(ifname, ins, ins.program.id)
            else:
                assert loaded is not None
                note = _attach(ifname, ins, loaded.prog_fd, modes, expected_fd)
                _pin_program(loaded.prog_fd, ins.pin_dir)
            if not fresh:
                egress_names = _configure(maps, False, ports, on_malformed, flows, forward, netns)
            final_ports, final_policy = maps.ports(), maps.on_malformed()
            final_flows, final_forward = maps.flows_enabled(), maps.forward_enabled()
    except BaseException:
        if fresh:
            pins.remove_pins(ifname, netns)  # ours alone: made under the lock
        raise
    finally:
        if expected_fd is not None:
            os.close(expected_fd)
        if loaded is not None:
            loaded.close()  # attached and pinned: the kernel holds it now
        elif map_fds:
            for fd in map_fds.values():
                os.close(fd)

    # report what the kernel says, not what we asked
    now = ownership.inspect_state(netlink.query(ifname, netns), netns)
    assert now.state.mode is not None and now.program is not None, "attached, yet the kernel shows no program"
    if through_libxdp and now.dispatcher is None:
        alone = ("libxdp cannot run its dispatcher on this kernel (its test load of a freplace "
                 "program failed): zerolayer's program runs alone, as xdp-loader's would, and "
                 "no other program can join it on this interface")
        note = f"{note}; {alone}" if note else alone
    return AttachResult(
        interface=ifname, netns=netns, action=action, mode=now.state.mode,
        requested_mode=mode, program_id=now.program.id,
        parser=parsers.of_program(now.program.name), pin_dir=ins.pin_dir,
        ports=final_ports, on_malformed=final_policy, flow_tracking=final_flows,
        forwarding=final_forward, egress=egress_names, note=note,
        forward_notes=egress.notes(ifname, netns, egress_names) if final_forward else [],
        dispatcher=ownership.members(now), priority=_member_priority(now),
    )


def _member_priority(ins: ownership.Inspection) -> int | None:
    """zerolayer's priority in the dispatcher on the interface, if it runs in one."""
    if not (ins.ours and ins.dispatcher and ins.program):
        return None
    return next((m.priority for m in ins.dispatcher.members if m.id == ins.program.id), None)


def _current_generation(ins: ownership.Inspection) -> int:
    """The generation the pinned config names (zerolayer's, attached)."""
    with ZerolayerMaps.open_pinned(ins.pin_dir) as maps:
        return maps.generation()


def _through_libxdp(ifname: str, ins: ownership.Inspection, modes: list[str],
                    priority: int, generation: int) -> str | None:
    """Attach the program of GENERATION through libxdp, trying MODES in
    order, and pin it. Returns a note when a mode was skipped."""
    note = None
    ifindex, netns = ins.state.ifindex, ins.netns
    for i, mode in enumerate(modes):
        with compiler.logged("zerolayer-libxdp-") as log_path, \
                compiler.opened_token(ins.pin_dir, log_path, generation) as (obj, name):
            try:
                prog_fd = dispatcher.attach(obj, ifindex, mode, priority, netns,
                                            frags=parsers.of_program(name) == parsers.FULL)
            except OSError as exc:
                last = i == len(modes) - 1
                if mode == "native" and not last and exc.errno in netlink.NATIVE_UNSUPPORTED:
                    note = f"native mode unavailable ({exc.strerror}): using skb mode"
                    continue
                raise _libxdp_error(ifname, mode, name, exc, log_path) from None
        try:
            _pin_program(prog_fd, ins.pin_dir)
        finally:
            os.close(prog_fd)
        return note
    raise AssertionError("no mode to try")  # _modes_to_try gives at least one


def _libxdp_error(ifname: str, mode: str, name: str, exc: OSError,
                  log_path: str) -> ZerolayerError:
    """One line for an attach libxdp failed; LOG_PATH holds what it said."""
    if exc.errno == errno.EBUSY:
        return ZerolayerError(
            f"another XDP program, outside libxdp's dispatcher, appeared on {ifname} while "
            f"attaching; nothing was changed (log: {log_path})")
    if compiler.verifier_rejected(log_path):
        return compiler.load_error(name, exc, log_path)
    hint = "; try --mode skb" if mode == "native" else ""
    return ZerolayerError(f"attaching to {ifname} in {mode} mode through libxdp failed: "
                          f"{exc.strerror}{hint} (log: {log_path})")


def _leave(ifname: str, ins: ownership.Inspection, prog_id: int) -> None:
    """Take zerolayer's program PROG_ID out of the dispatcher on IFNAME."""
    mode = (ins.dispatcher.mode if ins.dispatcher else None) or ins.state.mode
    assert mode is not None
    with compiler.logged("zerolayer-libxdp-") as log_path:
        try:
            dispatcher.detach(prog_id, ins.state.ifindex, mode, ins.netns)
        except OSError as exc:
            raise ZerolayerError(
                f"taking program {prog_id} out of libxdp's dispatcher on {ifname} failed: "
                f"{exc.strerror} (log: {log_path})") from None


def detach(ifname: str, netns: str | None = None,
           wait_s: float = iface_lock.DEFAULT_WAIT_S) -> DetachResult:
    """Remove zerolayer's program from IFNAME and its pins. Another tool's
    program is never touched. Nothing is removed unless all of it can be:
    the lock is held and bpffs is writable before anything changes."""
    preflight("zerolayer detach")
    with iface_lock.held(ifname, netns, wait_s):
        bpffs.require_writable("zerolayer detach")
        return _detach_locked(ifname, netns)


def _detach_locked(ifname: str, netns: str | None) -> DetachResult:
    ins, stale = _stale_pins(ifname, netns)
    if stale is not None:
        pins.remove_pins(ifname, netns)
        return DetachResult(ifname, netns, "removed_stale_pins", None, stale)
    assert ins is not None  # not stale: it could be read
    if not ins.ours:
        if ins.dispatcher is not None:
            names = ", ".join(m.name for m in ins.dispatcher.members) or "no program"
            extra = f": libxdp's dispatcher there runs {names}, none of them zerolayer's"
        elif ins.program:
            extra = (f": it runs '{ins.program.name}' (id {ins.program.id}), not loaded by "
                     f"zerolayer; remove it with {_foreign_removal(ifname, ins.state.mode, netns)}")
        else:
            extra = ""
        raise ZerolayerError(f"zerolayer is not attached to {ifname}{extra}")

    prog = ins.program
    assert prog is not None and ins.state.mode is not None  # ours: attached, and read
    if ins.dispatcher is not None:
        _leave(ifname, ins, prog.id)
        pins.remove_pins(ifname, netns)
        return DetachResult(ifname, netns, "detached", prog.id, None)
    prog_fd = bpfsys.prog_fd_by_id(prog.id)
    try:
        netlink.clear_program(ins.state.ifindex, ins.state.mode, prog_fd, netns)
    except OSError as exc:
        raise ZerolayerError(f"detaching from {ifname} failed: {exc.strerror}") from None
    finally:
        os.close(prog_fd)
    pins.remove_pins(ifname, netns)
    return DetachResult(ifname, netns, "detached", prog.id, None)


def _stale_pins(ifname: str, netns: str | None) -> tuple[ownership.Inspection | None, str | None]:
    """IFNAME's inspection (None when it cannot be read) and, when its pins
    are stale, why (None: there are none, or zerolayer's program uses them).
    Raises when there is neither an interface nor pins."""
    if netns is not None and not netns_mod.exists(netns) and pins.has_pin_dir(ifname, netns):
        return None, f"network namespace {netns} is gone"
    try:
        ins = ownership.inspect(ifname, netns)
    except ZerolayerError:
        if not pins.has_pin_dir(ifname, netns):
            raise
        return None, "the interface no longer exists"
    if not ins.stale_pins:
        return ins, None
    if ins.program:
        return ins, f"{ifname} now runs '{ins.program.name}' (id {ins.program.id}), left in place"
    return ins, "the program was no longer attached"


def remove_stale(wait_s: float = iface_lock.DEFAULT_WAIT_S,
                 only_netns: set[str] | None = None) -> list[DetachResult]:
    """Remove every stale pin dir (spec §6.2): those of interfaces that are
    gone or run no zerolayer program, and all those of a namespace that is
    gone, whose pins alone hold its programs (they are freed with them).
    Each under its interface's lock; zerolayer's running programs and
    other tools' are left alone. ONLY_NETNS: just these gone namespaces'
    (apply --prune's scope). A gone namespace's lock dir goes last."""
    preflight("zerolayer detach")
    bpffs.require_writable("zerolayer detach --stale")
    pinned = pins.pinned_netns()
    gone = [ns for ns in pinned if not netns_mod.exists(ns)
            and (only_netns is None or ns in only_netns)]
    where: list[str | None] = list(gone)
    if only_netns is None:
        where = [None, *(ns for ns in pinned if netns_mod.exists(ns)), *gone]
    results = []
    for netns in where:
        for ifname in pins.pinned_interfaces(netns):
            with iface_lock.held(ifname, netns, wait_s):
                _, stale = _stale_pins(ifname, netns)
                if stale is not None:
                    pins.remove_pins(ifname, netns)
                    results.append(DetachResult(ifname, netns, "removed_stale_pins", None, stale))
    # Their lock dirs too (those of other gone namespaces with only locks left, for
    # --stale): no command can want them while the namespace stays gone.
    locks = {ns for ns in iface_lock.locked_netns() if not netns_mod.exists(ns)}
    for netns in sorted(set(gone) | (locks if only_netns is None else set())):
        if not netns_mod.exists(netns):  # not made again meanwhile
            pins.remove_netns_tree(netns)  # what is left: an empty ns: dir
            iface_lock.remove_netns(netns)
    return results
