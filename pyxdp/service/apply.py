# SPDX-License-Identifier: Apache-2.0
"""Make the host match a configuration: observe it, plan (plan.py), carry
out each action with the library's own commands (attach, upgrade, config,
detach, tune: each holds its interface's lock), then observe again to say
whether it matches now. docs/spec.md §10.3-10.5."""

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import ethtool
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.privileges import preflight
from pyxdp.service import lock
from pyxdp.service.config import Config
from pyxdp.service.plan import KEEP, UNMET, Action, Link, Observed, matched, plan, scope_of
from pyxdp.xdp import iface_lock, live_config, loader, netlink, ownership, parsers, pins

# The status of each action in a report.
OK, PLANNED, DONE, FAILED, REFUSED = "ok", "planned", "done", "failed", "refused"


@dataclass
class Outcome:
    action: Action
    status: str
    changed: bool = False
    error: str | None = None

    def to_json(self) -> dict:
        a = self.action
        return {"action": a.action, "interface": a.interface, "netns": a.netns,
                "reason": a.reason, "status": self.status, "changed": self.changed,
                "error": self.error}


@dataclass
class Report:
    path: str
    dry_run: bool
    prune: bool
    outcomes: list[Outcome] = field(default_factory=list)
    matched: bool = False  # the host matches the file (after the actions, unless a dry run)

    @property
    def changed(self) -> bool:
        return any(o.changed for o in self.outcomes)

    def to_json(self) -> dict:
        return {"file": self.path, "dry_run": self.dry_run, "prune": self.prune,
                "changed": self.changed, "matched": self.matched,
                "actions": [o.to_json() for o in self.outcomes]}


def _links(netns: str | None, drivers: bool) -> list[Link]:
    rows = ownership.status(None, netns)
    gone = [r["interface"] for r in rows if r["ifindex"] is None]
    links = []
    for r in rows:
        exists = r["ifindex"] is not None
        driver = None
        if drivers and exists:
            with netns_mod.entered(netns):
                driver = ethtool.driver_name(r["interface"])
        renamed_from = None
        if gone and r["owner"] == ownership.FOREIGN and parsers.of_program(r["program_name"]):
            renamed_from = _renamed_from(r["interface"], netns, gone)
        links.append(Link(
            name=r["interface"], netns=netns, exists=exists, driver=driver, owner=r["owner"],
            program=r["program_name"], mode=r["mode"], parser=r.get("parser"),
            stale_pins=r["stale_pins"], renamed_from=renamed_from,
            ports=tuple(r.get("ports", ())), on_malformed=r.get("on_malformed"),
            flows=r.get("flow_tracking"), forward=r.get("forwarding"),
            dispatcher=r["dispatcher"] is not None, priority=_our_priority(r)))
    return links


def _our_priority(row: dict) -> int | None:
    """zerolayer's priority in the dispatcher of a status row, if it is in one."""
    return next((m["priority"] for m in row.get("dispatcher") or ()
                 if m["owner"] == ownership.ZEROLAYER), None)


def _renamed_from(ifname: str, netns: str | None, gone: list[str]) -> str | None:
    """The name among GONE whose pins the program on IFNAME uses: the name
    IFNAME had when zerolayer was attached (pin dirs are named after the
    interface, so a renamed one's look like another tool's program)."""
    state = netlink.query(ifname, netns)
    for old in gone:
        if ownership.inspect_state(dataclasses.replace(state, ifname=old), netns).ours:
            return old
    return None


def _follow_rename(ifname: str, old: str, netns: str | None, wait_s: float) -> None:
    """Move the pins of OLD to IFNAME, under both interfaces' locks, once the
    program on IFNAME is seen to use them."""
    first, second = sorted((ifname, old))
    with iface_lock.held(first, netns, wait_s), iface_lock.held(second, netns, wait_s):
        if _renamed_from(ifname, netns, [old]) != old:
            raise ZerolayerError(f"{ifname} changed meanwhile: its pins were left under {old}")
        if pins.has_pin_dir(ifname, netns):
            raise ZerolayerError(f"{pins.pin_dir(ifname, netns)} exists: remove it (`zerolayer "
                                 f"detach {ifname}{f' --netns {netns}' if netns else ''}`) "
                                 "and apply again")
        pins.rename(old, ifname, netns)


def _tuning_changes(config: Config) -> int | None:
    if config.tuning is None:
        return None
    report = _tune(config, dry_run=True)
    return sum(1 for row in report.rows if row.status == "planned")


def _tune(config: Config, dry_run: bool):
    from pyxdp.tuning import engine, profile

    t = config.tuning
    assert t is not None
    return engine.apply(profile.load(t.profile), netns=t.netns, interfaces=t.interfaces,
                        dry_run=dry_run, strict=t.strict, state_dir=t.state_dir)


def observe(config: Config, scope: set[str | None]) -> Observed:
    """The host as the plan needs it: every link of each namespace in SCOPE
    and each one the file names (those that exist), zerolayer's settings
    where it runs, and what the tuning profile would change."""
    drivers = {i.netns for i in config.interfaces if i.match and i.match.driver}
    links = {}
    for netns in scope | config.namespaces():
        if netns is None or netns_mod.exists(netns):
            links[netns] = _links(netns, netns in drivers)
    return Observed(links, parsers.for_this_kernel(), _tuning_changes(config),
                    tuple(pins.stale_netns()))


def _run(action: Action, config: Config, wait_s: float, done: list[str]) -> None:
    """Carry out ACTION; each step that went through is added to DONE, so a
    reattach that fails after its detach still says it changed the host."""
    want, name, netns = action.want, action.interface, action.netns
    if action.action == "tune":
        report = _tune(config, dry_run=False)
        done.append("tune")
        if report.error:
            raise ZerolayerError(report.error)
        return
    if action.action == "unpin":
        assert netns is not None
        loader.remove_stale(wait_s, only_netns={netns})
        done.append("unpin")
        return
    assert name is not None
    if action.action == "rename":
        assert action.renamed_from is not None
        _follow_rename(name, action.renamed_from, netns, wait_s)
        done.append("rename")
        return
    if action.action in ("detach", "reattach"):
        loader.detach(name, netns, wait_s=wait_s)
        done.append("detach")
        if action.action == "detach":
            return
    assert want is not None
    if action.action == "configure":
        live_config.update(name, netns, ports=list(want.ports), on_malformed=want.on_malformed,
                           flows=want.flows, forward=want.forward, wait_s=wait_s)
    else:
        loader.attach(name, mode=want.mode, ports=list(want.ports),
                      on_malformed=want.on_malformed, flows=want.flows, forward=want.forward,
                      replace=action.action == "replace", netns=netns, wait_s=wait_s,
                      priority=want.priority)
    done.append(action.action)


def converge(config: Config, *, prune: bool = False, dry_run: bool = False,
             wait_s: float = iface_lock.DEFAULT_WAIT_S,
             scope: set[str | None] | None = None,
             on_outcome: Callable[[Outcome], None] | None = None,
             stop: threading.Event | None = None) -> Report:
    """Plan, and unless DRY_RUN carry the plan out under the apply lock
    and check the host matches afterwards. SCOPE: the namespaces --prune
    looks at (plan.scope_of). ON_OUTCOME is told each action's outcome as
    it is known (`apply --watch` logs it then: a first pass over 50
    interfaces takes half a minute); once STOP is set (SIGTERM under
    --watch) no further action starts, and the host is not said to match."""
    preflight("zerolayer apply")
    scope = scope_of(config, scope)
    report = Report(config.path, dry_run, prune)
    if dry_run:
        actions = plan(config, observe(config, scope), prune, scope)
        report.outcomes = [Outcome(a, OK if a.action == KEEP else REFUSED if a.action in UNMET
                                   else PLANNED) for a in actions]
        report.matched = matched(actions)
        return report
    stopped = stop.is_set if stop is not None else lambda: False
    with lock.held(wait_s, stopped):
        actions = plan(config, observe(config, scope), prune, scope)
        report.outcomes = _carry_out(actions, config, wait_s, on_outcome, stopped)
        if any(a.action == "rename" for a in actions) and not stopped():
            again = plan(config, observe(config, scope), prune, scope)  # now the pins followed
            report.outcomes += _carry_out([a for a in again if a.action != KEEP], config,
                                          wait_s, on_outcome, stopped)
        report.matched = not stopped() and matched(plan(config, observe(config, scope), prune,
                                                        scope))
    return report


def _carry_out(actions: list[Action], config: Config, wait_s: float,
               on_outcome: Callable[[Outcome], None] | None,
               stopped: Callable[[], bool]) -> list[Outcome]:
    outcomes = []
    for action in actions:
        if stopped():
            break
        outcomes.append(_outcome(action, config, wait_s))
        if on_outcome is not None:
            on_outcome(outcomes[-1])
    return outcomes


def _outcome(action: Action, config: Config, wait_s: float) -> Outcome:
    if action.action == KEEP:
        return Outcome(action, OK)
    if action.action in UNMET:
        return Outcome(action, REFUSED)
    done: list[str] = []
    try:
        _run(action, config, wait_s, done)
    except ZerolayerError as exc:
        return Outcome(action, FAILED, bool(done), str(exc))
    return Outcome(action, DONE, True)


def describe(outcome: Outcome) -> str:
    """OUTCOME as one line: `attach dut0 (netns ns1): done: no XDP program runs there`."""
    a = outcome.action
    target = f" {a.interface}" if a.interface else ""
    where = f" (netns {a.netns})" if a.netns else ""
    return f"{a.action}{target}{where}: {outcome.status}: {outcome.error or a.reason}"
