# SPDX-License-Identifier: Apache-2.0
"""Turn the capability reports of conformance runs (tests/support/capabilities.py
writes one per kernel) into the kernel table of docs/kernels.md.

    python3 vagrant/vm/kernel_table.py REPORT.json...           print the table
    python3 vagrant/vm/kernel_table.py --write docs/kernels.md REPORT.json...
                                                  replace the table there

A cell says what the tests saw when every test proving that capability
passed, "FAILED" when any failed, the skip reason when they were skipped, and
"not run" when no test proved it on that kernel. Nothing in it is typed by
hand. The rows follow vagrant/vm/kernels; a kernel not listed there (the
host's) comes last."""

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

KERNELS = Path(__file__).with_name("kernels")
BEGIN, END = "<!-- kernel-table:begin -->", "<!-- kernel-table:end -->"


def cell(outcome: dict | None) -> str:
    if not outcome:
        return "not run"
    if outcome["failed"]:
        return f"**FAILED** ({len(outcome['failed'])} of {len(outcome['failed']) + len(outcome['passed'])} tests)"
    if outcome["passed"]:
        n = len(outcome["passed"])
        return f"{'; '.join(outcome['seen']) or 'yes'} ({n} test{'s' * (n > 1)})"
    return "skipped: " + "; ".join(sorted(set(outcome["skipped"])))


def listed() -> list[str]:
    """The rig's kernel names, in vagrant/vm/kernels' order."""
    rows = (line.split() for line in KERNELS.read_text().splitlines())
    return [fields[0] for fields in rows if len(fields) >= 4 and not fields[0].startswith("#")]


def row_order(names: list[str]) -> Callable[[dict], tuple[int, list[int]]]:
    """A sort key for reports: listed kernels in the list's order, then the others by version."""
    def key(report: dict) -> tuple[int, list[int]]:
        release = report["kernel"]
        for i, name in enumerate(names):
            if release.startswith(name + "."):
                return i, []
        return len(names), [int(x) for x in re.findall(r"\d+", release)[:2]]
    return key


def table(reports: list[dict]) -> str:
    columns = reports[0]["columns"]
    lines = ["| kernel | userspace | tests | " + " | ".join(columns.values()) + " |",
             "|---" * (len(columns) + 3) + "|"]
    for report in sorted(reports, key=row_order(listed())):
        cells = [cell(report["capabilities"].get(name)) for name in columns]
        # conformance.sh records the userspace and the selection (full or smoke).
        lines.append(f"| {report['kernel']} | {report.get('system') or '?'} | "
                     f"{report.get('selection') or '?'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="DOC", help="rewrite the table between the kernel-table markers here")
    parser.add_argument("reports", nargs="+")
    args = parser.parse_args()
    reports = []
    for path in args.reports:
        with open(path) as f:
            reports.append(json.load(f))
    text = table(reports)
    if not args.write:
        print(text)
        return 0
    with open(args.write) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        print(f"{args.write} has no {BEGIN} ... {END} section", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(args.write, "w") as f:
        f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
