# SPDX-License-Identifier: Apache-2.0
"""What a tune run did, one row per knob, as JSON; the CLI draws the table."""

from dataclasses import asdict, dataclass, field

STATUSES = ("applied", "unchanged", "kept", "planned", "restored", "drifted", "skipped", "refused")


@dataclass
class Row:
    """One knob's line; to_json keeps the field order, as docs/spec.md §5.8 shows it."""

    step: str
    knob: str
    before: str | None = None
    after: str | None = None
    status: str = ""
    reason: str = ""
    kind: str = ""
    scope: str = ""
    item: int | None = None  # the checklist item, for profiles that follow one

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Report:
    action: str  # apply, dry-run, revert, revert-dry-run, verify
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
