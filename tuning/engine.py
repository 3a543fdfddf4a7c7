# SPDX-License-Identifier: Apache-2.0
"""The engine: apply a profile in order, and revert or verify what it did.

- apply: each knob in profile order; read it, and if it differs from the
  target, record the original in the state file, write, and read back.
- apply with a bound (tuning.bound): a value already past the profile's is
  kept, field by field, and only what moved is recorded as written.
- apply with scopes: only the knobs of those scopes; the others are skipped
  and say so (the bench's tune section keeps host-wide knobs out this way).
- revert: the recorded knobs in reverse order; only a knob that still holds
  what zerolayer wrote is restored, others are reported as drifted. With
  dry_run it plans the same and changes nothing.
- verify: every recorded knob still holds what zerolayer set, or it drifted.
"""

import contextlib
import errno
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.tuning import bound, preflight
from pyxdp.tuning.host import Host, opened
from pyxdp.tuning.kind import Fixed
from pyxdp.tuning.knobs import Knob, Unavailable, reason_for
from pyxdp.tuning.preflight import Facts
from pyxdp.tuning.profile import Profile
from pyxdp.tuning.registry import KINDS, KNOBS
from pyxdp.tuning.report import Report, Row
from pyxdp.tuning.state import Store, default_dir


@dataclass(frozen=True)
class Line:
    """One line of the plan: a knob and the value the profile asks of it, or a
    fixed row (a note, a refusal), under its step."""

    step: str
    item: int | None
    why: str
    what: Knob | Fixed
    value: str = ""  # what the profile asks of the knob (Knob.asked); a fixed row has none
    bound: str | None = None  # "at-least" or "at-most": see tuning.bound


def plan(profile: Profile, host: Host, facts: Facts, interfaces: Sequence[str]) -> list[Line]:
    """The profile's entries in order, each expanded by its kind (per-device
    knobs once per interface)."""
    lines = []
    for step in profile.steps:
        for spec in step.knobs:
            for what in KINDS[spec.kind].expand(spec, host, facts, interfaces):
                if isinstance(what, Knob):
                    line = Line(step.id, step.item, spec.why or step.why, what,
                                what.asked(spec), spec.get("bound"))
                else:
                    line = Line(step.id, step.item, spec.why or step.why, what)
                lines.append(line)
    return lines


def _require_root(action: str) -> None:
    if os.geteuid() != 0:
        raise ZerolayerError(f"{action} needs root: run it with sudo")


def _check_interfaces(host: Host, interfaces: Sequence[str]) -> None:
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


def apply(profile: Profile, *, netns: str | None = None, interfaces: Sequence[str] = (),
          dry_run: bool = False, strict: bool = False, root: str | None = None,
          state_dir: str | None = None, scopes: Collection[str] | None = None) -> Report:
    """Apply PROFILE; with SCOPES (of "global", "netns"), only knobs of those scopes."""
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
            run = _Apply(host, store, state, scopes)
            for line in plan(profile, host, facts, interfaces):
                row, missing = run.one(line)
                report.rows.append(row)
                if missing and strict and report.error is None:
                    report.error = (
                        f"--strict: {'apply would stop' if dry_run else 'stopped'} at "
                        f"step {row.step} ({row.knob}): {row.reason}"
                    )
                    if state is not None:
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
    """Applies plan lines one by one; without a STATE to record in, it only plans."""

    def __init__(self, host: Host, store: Store, state: dict | None,
                 scopes: Collection[str] | None = None):
        self.host = host
        self.store = store
        self.state = state
        self.scopes = scopes

    def one(self, line: Line) -> tuple[Row, bool]:
        """The row for LINE, and whether it was skipped for something missing."""
        if isinstance(line.what, Fixed):
            fixed = line.what
            # Nothing is written: the row shows what the value is, and no "after".
            return Row(line.step, fixed.label, before=fixed.before, status=fixed.status,
                       reason=fixed.reason, kind=fixed.kind, item=line.item), False
        knob = line.what
        row = Row(line.step, knob.label, kind=knob.kind, scope=knob.scope, item=line.item)

        def done(status, reason, after=None, missing=False):
            row.status, row.reason, row.after = status, reason, after
            return row, missing

        if self.scopes is not None and knob.scope not in self.scopes:
            return done("skipped", f"{knob.scope} knob: left out, only "
                        f"{' and '.join(sorted(self.scopes)) or 'no'} knobs were asked for")
        if self.host.netns is not None and knob.scope == "global":
            return done("skipped", "global knob: with --netns only the namespace's "
                        "own knobs change, this one would change the whole host")
        try:
            row.before = before = knob.read()
            asked = knob.target(line.value)
        except Unavailable as exc:
            return done("skipped", str(exc), after=row.before, missing=exc.missing)
        except OSError as exc:
            return done("skipped", reason_for(exc), after=row.before, missing=True)
        why = _with_note(line.why, knob)
        target, kept = (asked, []) if line.bound is None else bound.held(before, asked, line.bound)
        if kept and line.bound is not None:
            why = bound.kept_reason(before, asked, line.bound, kept) + (
                "" if knob.same(before, target) else f"; {why}")
        state = self.state
        if knob.same(before, target):
            if state is not None:
                self._remember(state, line, knob, before, target, wrote=False)
            return done("kept" if kept else "unchanged", why, after=before)
        if state is None:
            return done("planned", why, after=target)

        # Write-ahead: the original is on disk before the knob changes.
        entry, new = self._remember(state, line, knob, before, target, wrote=True)
        self.store.save(state)
        try:
            knob.write(target)
            after = knob.read()
        except OSError as exc:
            self._put_back(state, knob, before, entry, new)
            return done("skipped", reason_for(exc, target), after=before, missing=True)
        if not knob.same(after, target):
            self._put_back(state, knob, before, entry, new)
            return done("skipped", f"read back {after!r} after writing {target!r}; "
                        f"put {before!r} back", after=before, missing=True)
        return done("applied", why, after=after)

    @staticmethod
    def _remember(state: dict, line: Line, knob: Knob, before: str, target: str,
                  wrote: bool) -> tuple[dict, bool]:
        for entry in state["knobs"]:
            if entry["key"] == knob.key:
                # The first snapshot stays: `original` is never replaced.
                entry["written"] = target
                entry["wrote"] = entry["wrote"] or wrote
                return entry, False
        entry = {
            "key": knob.key, "kind": knob.kind, "params": knob.params,
            "scope": knob.scope, "step": line.step, "item": line.item, "label": knob.label,
            "original": before, "written": target, "wrote": wrote,
        }
        if line.bound:  # verify checks the bound, not the value held
            entry.update(bound=line.bound, asked=line.value)
        state["knobs"].append(entry)
        return entry, True

    def _put_back(self, state: dict, knob: Knob, before: str, entry: dict,
                  new: bool) -> None:
        """After a failed write: restore BEFORE, and forget the knob if that worked."""
        try:
            if not knob.same(knob.read(), before):
                knob.restore(before)
            back = knob.same(knob.read(), before)
        except OSError:
            back = False
        if back and new:
            state["knobs"].remove(entry)
        self.store.save(state)


def _rebuild(entry: dict, host: Host, facts: Facts) -> Knob:
    return KNOBS[entry["kind"]](host, facts, **entry["params"])


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
           state_dir: str | None = None, dry_run: bool = False) -> Report:
    if netns is not None or root is None:
        _require_root("tune --revert")  # the state file is root's too
    with _tuning(netns, root, state_dir) as (host, facts, store):
        # Like apply's, a dry run takes no lock: it reads, and writes nothing.
        with contextlib.nullcontext() if dry_run else store.locked(create=False):
            state = _recorded(store, host, "revert")
            report = Report("revert-dry-run" if dry_run else "revert",
                            "+".join(state["profiles"]) if state else None,
                            netns, host.where, store.path)
            if state is None:
                report.notes.append(f"nothing to revert: zerolayer has not tuned {host.where}")
                return report
            kept = []
            for entry in reversed(state["knobs"]):
                if not entry["wrote"]:
                    continue  # zerolayer found it right and never wrote it
                row, keep = _revert_one(entry, _rebuild(entry, host, facts), dry_run)
                report.rows.append(row)
                if keep:
                    kept.append(entry)
            if not dry_run:
                _settle(store, state, kept, report)
        report.preflight = facts.summary()
    return report


def _settle(store: Store, state: dict, kept: list[dict], report: Report) -> None:
    """After a revert: forget the state, or keep what could not be restored."""
    if not kept:
        store.remove()
        return
    state["knobs"] = [e for e in state["knobs"] if e in kept]
    store.save(state)
    report.error = (
        f"{len(kept)} knob(s) could not be restored; {store.path} keeps "
        "their original values: fix the cause and run --revert again"
    )


def _revert_one(entry: dict, knob: Knob, dry_run: bool) -> tuple[Row, bool]:
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
    if dry_run:
        return done("planned", "would restore: holds the value zerolayer wrote",
                    current, original)
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
    limit = entry.get("bound")
    if limit is not None and bound.satisfied(current, entry["asked"], limit):
        row.status = "applied"
        row.reason = f"holds {limit.replace('-', ' ')} {entry['asked']}"
    elif limit is None and knob.same(current, written):
        row.status = "applied"
        row.reason = ("holds the value zerolayer wrote" if entry["wrote"]
                      else "holds the profile's value (it already did)")
    else:
        row.status = "drifted"
        row.reason = (f"holds {current!r}, the profile set {written!r}" if limit is None else
                      f"holds {current!r}, the profile asks {limit.replace('-', ' ')} "
                      f"{entry['asked']!r}")
    return row
