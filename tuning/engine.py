"""The engine: apply a profile in order, and revert or verify what it did.

- apply: each knob in profile order; read it, and if it differs from the
  target, record the original in the state file, write, and read back.
- revert: the recorded knobs in reverse order; only a knob that still holds
  what zerolayer wrote is restored, others are reported as drifted.
- verify: every recorded knob still holds what zerolayer set, or it drifted.
"""

import contextlib
import errno
import os
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.tuning import preflight
from pyxdp.tuning.host import Host, opened
from pyxdp.tuning.irq import IrqAffinity
from pyxdp.tuning.knobs import (
    CpuIdle,
    Governor,
    Knob,
    NicAttr,
    Sysctl,
    Unavailable,
    read_text,
    reason_for,
)
from pyxdp.tuning.profile import SYSCTL_NAME, Profile
from pyxdp.tuning.qdisc import RootQdisc
from pyxdp.tuning.report import Report, Row
from pyxdp.tuning.state import Store, default_dir

KNOB_CLASSES = {
    cls.kind: cls for cls in (Sysctl, NicAttr, RootQdisc, IrqAffinity, Governor, CpuIdle)
}


@dataclass
class Item:
    """One line of the plan: a knob and the profile's value, or a fixed row."""

    step: str
    item: int | None
    why: str
    knob: Knob | None = None
    value: str | None = None
    row: Row | None = None


def plan(profile: Profile, host: Host, facts, interfaces) -> list[Item]:
    """The profile's knobs in order, per-device ones once per interface."""
    return [item for step in profile.steps for spec in step.knobs
            for item in _expand(step, spec, host, facts, interfaces)]


def _expand(step, spec, host: Host, facts, interfaces) -> list[Item]:
    why = spec.why or step.why

    def knob(k: Knob) -> Item:
        return Item(step.id, step.item, why, k, spec.get("value"))

    def fixed(label, status, reason, kind, before=None) -> Item:
        row = Row(step.id, label, status=status, reason=reason, before=before,
                  after=before, kind=kind, item=step.item)
        return Item(step.id, step.item, why, row=row)

    def per_interface(make, label) -> list[Item]:
        return [knob(make(iface)) for iface in interfaces] or [
            fixed(label, "skipped", "no --interface named, so no device to set", spec.kind)]

    if spec.kind == "sysctl":
        return [knob(Sysctl(host, facts, spec["name"], spec["scope"]))]
    if spec.kind == "qdisc":
        # Roots first: see qdisc.py for why revert needs this order.
        return per_interface(lambda i: RootQdisc(host, facts, i), "IFACE root qdisc") + [
            knob(Sysctl(host, facts, "net.core.default_qdisc", "global"))]
    if spec.kind == "nic":
        return per_interface(lambda i: NicAttr(host, facts, i, spec["attr"]),
                             f"IFACE/{spec['attr']}")
    if spec.kind == "irq_affinity":
        return per_interface(lambda i: IrqAffinity(host, facts, i), "IFACE irq affinity")
    if spec.kind == "governor":
        return [knob(Governor(host, facts))]
    if spec.kind == "cpuidle":
        return [knob(CpuIdle(host, facts, spec["max_latency_us"]))]
    if spec.kind == "refuse":
        return [fixed(spec["name"], "refused", f"asked for {spec['value']}: {spec['reason']}",
                      "sysctl", _current(host, spec["name"]))]
    # A note: a checklist line that is not a host knob, with the reason why.
    return [fixed(spec["name"], "skipped", spec["reason"], "note", _current(host, spec["name"]))]


def _current(host: Host, name: str) -> str | None:
    """A sysctl's value when NAME is one that exists here, to show beside a note."""
    if not SYSCTL_NAME.match(name):
        return None
    try:
        return read_text(host.sysctl_path(name))
    except OSError:
        return None


def _require_root(action: str) -> None:
    if os.geteuid() != 0:
        raise ZerolayerError(f"{action} needs root: run it with sudo")


def _check_interfaces(host: Host, interfaces) -> None:
    if host.sys is None:
        return  # the namespace's sysfs is missing; each knob will say so
    for iface in interfaces:
        if not host.has_interface(iface):
            raise ZerolayerError(
                f"no interface {iface!r} in {host.where} (see `ip link`"
                f"{f' -n {host.netns}' if host.netns else ''})"
            )


@contextlib.contextmanager
def _tuning(netns: str | None, root: str | None, state_dir: str | None):
    """The host to tune (this thread inside NETNS), its facts, and its state store."""
    with opened(netns, root) as host:
        yield host, preflight.gather(host), Store(state_dir or default_dir(root), host)


def _with_note(why: str, knob: Knob) -> str:
    note = knob.note()
    return f"{why}; {note}" if note else why


def apply(profile: Profile, *, netns: str | None = None, interfaces=(),
          dry_run: bool = False, strict: bool = False, root: str | None = None,
          state_dir: str | None = None) -> Report:
    if netns is not None or (root is None and not dry_run):
        _require_root("tune")
    with _tuning(netns, root, state_dir) as (host, facts, store):
        _check_interfaces(host, interfaces)
        report = Report("dry-run" if dry_run else "apply", profile.name, netns,
                        host.where, store.path)
        # A dry run reads no state and writes none, so it takes no lock either
        # (and does not create the state directory).
        with contextlib.nullcontext() if dry_run else store.locked():
            state = None if dry_run else _state_for_apply(store, profile, report)
            run = _Apply(host, store, state, dry_run)
            for item in plan(profile, host, facts, interfaces):
                row, missing = run.one(item)
                report.rows.append(row)
                if missing and strict and report.error is None:
                    report.error = (
                        f"--strict: {'apply would stop' if dry_run else 'stopped'} at "
                        f"step {row.step} ({row.knob}): {row.reason}"
                    )
                    if not dry_run:
                        changed = sum(1 for e in state["knobs"] if e["wrote"])
                        report.error += (
                            f"; {changed} knob(s) changed before it, "
                            "`zerolayer tune --revert` undoes them"
                        )
                        break
            if state is not None and state["knobs"]:
                store.save(state)
        report.preflight = facts.summary()
    return report


def _state_for_apply(store: Store, profile: Profile, report: Report) -> dict:
    state = store.load()
    if state is not None:
        stale = store.stale(state)
        if stale:
            report.notes.append(
                f"discarded {store.path}: it described {stale}, not this one"
            )
            state = None
    if state is None:
        state = store.new()
    if profile.name not in state["profiles"]:
        state["profiles"].append(profile.name)
    return state


class _Apply:
    def __init__(self, host: Host, store: Store, state: dict | None, dry_run: bool):
        self.host = host
        self.store = store
        self.state = state
        self.dry_run = dry_run

    def one(self, item: Item) -> tuple[Row, bool]:
        """The row for ITEM, and whether it was skipped for something missing."""
        if item.row is not None:
            return item.row, False
        knob = item.knob
        row = Row(item.step, knob.label, kind=knob.kind, scope=knob.scope, item=item.item)

        def done(status, reason, after=None, missing=False):
            row.status, row.reason, row.after = status, reason, after
            return row, missing

        if self.host.netns is not None and knob.scope == "global":
            return done("skipped", "global knob: with --netns only the namespace's "
                        "own knobs change, this one would change the whole host")
        try:
            row.before = before = knob.read()
            target = knob.target(item.value)
        except Unavailable as exc:
            return done("skipped", str(exc), after=row.before, missing=exc.missing)
        except OSError as exc:
            return done("skipped", reason_for(exc), after=row.before, missing=True)
        why = _with_note(item.why, knob)
        if knob.same(before, target):
            if self.state is not None:
                self._remember(item, knob, before, target, wrote=False)
            return done("unchanged", why, after=before)
        if self.dry_run:
            return done("planned", why, after=target)

        # Write-ahead: the original is on disk before the knob changes.
        entry, new = self._remember(item, knob, before, target, wrote=True)
        self.store.save(self.state)
        try:
            knob.write(target)
            after = knob.read()
        except OSError as exc:
            self._put_back(knob, before, entry, new)
            return done("skipped", reason_for(exc, target), after=before, missing=True)
        if not knob.same(after, target):
            self._put_back(knob, before, entry, new)
            return done("skipped", f"read back {after!r} after writing {target!r}; "
                        f"put {before!r} back", after=before, missing=True)
        return done("applied", why, after=after)

    def _remember(self, item: Item, knob: Knob, before: str, target: str,
                  wrote: bool) -> tuple[dict, bool]:
        for entry in self.state["knobs"]:
            if entry["key"] == knob.key:
                # The first snapshot stays: `original` is never replaced.
                entry["written"] = target
                entry["wrote"] = entry["wrote"] or wrote
                return entry, False
        entry = {
            "key": knob.key, "kind": knob.kind, "params": knob.params,
            "scope": knob.scope, "step": item.step, "item": item.item, "label": knob.label,
            "original": before, "written": target, "wrote": wrote,
        }
        self.state["knobs"].append(entry)
        return entry, True

    def _put_back(self, knob: Knob, before: str, entry: dict, new: bool) -> None:
        """After a failed write: restore BEFORE, and forget the knob if that worked."""
        try:
            if not knob.same(knob.read(), before):
                knob.restore(before)
            back = knob.same(knob.read(), before)
        except OSError:
            back = False
        if back and new:
            self.state["knobs"].remove(entry)
        self.store.save(self.state)


def _rebuild(entry: dict, host: Host, facts) -> Knob:
    return KNOB_CLASSES[entry["kind"]](host, facts, **entry["params"])


def _recorded(store: Store, host: Host, verb: str) -> dict | None:
    state = store.load()
    if state is None:
        return None
    stale = store.stale(state)
    if stale:
        raise ZerolayerError(
            f"cannot {verb}: {store.path} describes {stale}, not this one; "
            "its values are meaningless now, remove it"
        )
    return state


def revert(*, netns: str | None = None, root: str | None = None,
           state_dir: str | None = None) -> Report:
    if netns is not None or root is None:
        _require_root("tune --revert")
    with _tuning(netns, root, state_dir) as (host, facts, store):
        with store.locked(create=False):
            state = _recorded(store, host, "revert")
            report = Report("revert", "+".join(state["profiles"]) if state else None,
                            netns, host.where, store.path)
            if state is None:
                report.notes.append(f"nothing to revert: zerolayer has not tuned {host.where}")
                return report
            kept = []
            for entry in reversed(state["knobs"]):
                if not entry["wrote"]:
                    continue  # zerolayer found it right and never wrote it
                row, keep = _revert_one(entry, _rebuild(entry, host, facts))
                report.rows.append(row)
                if keep:
                    kept.append(entry)
            if kept:
                state["knobs"] = [e for e in state["knobs"] if e in kept]
                store.save(state)
                report.error = (
                    f"{len(kept)} knob(s) could not be restored; {store.path} keeps "
                    "their original values: fix the cause and run --revert again"
                )
            else:
                store.remove()
        report.preflight = facts.summary()
    return report


def _revert_one(entry: dict, knob: Knob) -> tuple[Row, bool]:
    """The row for one recorded knob, and whether the state must keep it."""
    original, written = entry["original"], entry["written"]
    row = Row(entry["step"], entry["label"], kind=entry["kind"], scope=entry["scope"],
              item=entry.get("item"))

    def done(status, reason, before=None, after=None, keep=False):
        row.status, row.reason, row.before, row.after = status, reason, before, after
        return row, keep

    try:
        current = knob.read()
    except (OSError, Unavailable) as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOENT, errno.ENODEV):
            return done("skipped", f"{reason_for(exc)}: it is gone, nothing to restore")
        return done("skipped", reason_for(exc), keep=True)
    if knob.same(current, original):
        return done("unchanged", "holds its original value already", current, current)
    if not knob.same(current, written):
        return done("drifted", f"holds {current!r}, not the {written!r} zerolayer "
                    f"wrote: left alone (it was {original!r} before)", current, current)
    try:
        knob.restore(original)
        after = knob.read()
    except OSError as exc:
        return done("skipped", reason_for(exc, original), current, current, keep=True)
    if not knob.same(after, original):
        return done("skipped", f"read back {after!r} after restoring {original!r}",
                    current, after, keep=True)
    return done("restored", "held the value zerolayer wrote", current, after)


def verify(*, netns: str | None = None, root: str | None = None,
           state_dir: str | None = None) -> Report:
    if netns is not None:
        _require_root("tune --verify --netns")
    with _tuning(netns, root, state_dir) as (host, facts, store):
        with store.locked(create=False):
            state = _recorded(store, host, "verify")
        if state is None:
            raise ZerolayerError(
                f"nothing to verify: zerolayer has not tuned {host.where} "
                f"(no {store.path})"
            )
        report = Report("verify", "+".join(state["profiles"]), netns, host.where,
                        store.path)
        for entry in state["knobs"]:
            report.rows.append(_verify_one(entry, _rebuild(entry, host, facts)))
        drifted = sum(1 for row in report.rows if row.status == "drifted")
        if drifted:
            report.error = (
                f"drift: {drifted} knob(s) no longer hold what zerolayer set "
                "(see the table; `zerolayer tune --profile` sets them again)"
            )
        report.preflight = facts.summary()
    return report


def _verify_one(entry: dict, knob: Knob) -> Row:
    original, written = entry["original"], entry["written"]
    row = Row(entry["step"], entry["label"], before=original, kind=entry["kind"],
              scope=entry["scope"], item=entry.get("item"))
    try:
        current = knob.read()
    except (OSError, Unavailable) as exc:
        row.status, row.reason = "drifted", reason_for(exc)
        return row
    row.after = current
    if knob.same(current, written):
        row.status = "applied"
        row.reason = ("holds the value zerolayer wrote" if entry["wrote"]
                      else "holds the profile's value (it already did)")
    else:
        row.status = "drifted"
        row.reason = f"holds {current!r}, the profile set {written!r}"
    return row
