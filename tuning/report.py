"""What a tune run did, one row per knob: a table for people, JSON for programs."""

from dataclasses import dataclass, field

STATUSES = ("applied", "unchanged", "planned", "restored", "drifted", "skipped", "refused")


@dataclass
class Row:
    step: str
    knob: str
    status: str = ""
    reason: str = ""
    before: str | None = None
    after: str | None = None
    kind: str = ""
    scope: str = ""
    item: int | None = None  # the checklist item, for profiles that follow one

    def to_json(self) -> dict:
        return {
            "step": self.step,
            "knob": self.knob,
            "before": self.before,
            "after": self.after,
            "status": self.status,
            "reason": self.reason,
            "kind": self.kind,
            "scope": self.scope,
            "item": self.item,
        }


@dataclass
class Report:
    action: str  # apply, dry-run, revert, verify
    profile: str | None
    netns: str | None
    where: str
    state_file: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    preflight: dict | None = None
    error: str | None = None  # set when the command must exit 1

    def counts(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUSES}
        for row in self.rows:
            counts[row.status] += 1
        return {status: n for status, n in counts.items() if n}

    def to_json(self) -> dict:
        out = {
            "profile": self.profile,
            "netns": self.netns,
            "action": self.action,
            "steps": [row.to_json() for row in self.rows],
            "summary": self.counts(),
            "state_file": self.state_file,
            "notes": self.notes,
            "preflight": self.preflight,
        }
        if self.error:
            out["error"] = self.error
        return out

    def render(self) -> str:
        lines = [" ".join(filter(None, (self.action, self.profile, "on", self.where)))]
        if self.preflight:
            lines.append(_preflight_line(self.preflight))
        if self.rows:
            table = [("STEP", "KNOB", "BEFORE → AFTER", "STATUS", "REASON")]
            for row in self.rows:
                change = ""
                if row.before is not None or row.after is not None:
                    change = f"{_show(row.before)} → {_show(row.after)}"
                table.append((row.step, row.knob, change, row.status, row.reason))
            widths = [max(len(r[i]) for r in table) for i in range(4)]
            for r in table:
                cells = [r[i].ljust(widths[i]) for i in range(4)] + [r[4]]
                lines.append("  ".join(cells).rstrip())
        counts = self.counts()
        lines.append(
            ", ".join(f"{n} {status}" for status, n in counts.items())
            if counts else "nothing to do"
        )
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


def _show(value: str | None) -> str:
    return "-" if value is None else value


def _preflight_line(facts: dict) -> str:
    parts = [f"kernel {facts['kernel']}"]
    if facts.get("initial_netns") is not None:
        parts.append("initial netns" if facts["initial_netns"] else "not the initial netns")
    parts.append("/proc/sys writable" if facts["proc_sys_writable"] else "/proc/sys READ-ONLY")
    if facts.get("congestion_controls") is not None:
        parts.append(f"congestion controls: {' '.join(facts['congestion_controls'])}")
    checked = facts.get("qdiscs_checked") or {}
    if checked:
        parts.append("qdiscs: " + " ".join(
            f"{kind}{'' if ok else ' (absent)' if ok is False else ' (unknown)'}"
            for kind, ok in checked.items()
        ))
    parts.append(f"cpufreq: {'yes' if facts['cpufreq'] else 'no'}")
    if facts.get("irqbalance_pid"):
        parts.append(f"irqbalance running (pid {facts['irqbalance_pid']})")
    return "preflight: " + " · ".join(parts)
