# SPDX-License-Identifier: Apache-2.0
"""Turn the capability reports of conformance runs (tests/support/capabilities.py
writes one per kernel) into the README's kernel table.

    python3 vagrant/vm/kernel_table.py REPORT.json...           print the table
    python3 vagrant/vm/kernel_table.py --readme README.md REPORT.json...
                                                  replace the table in README

A cell says what the tests saw when every test proving that capability
passed, "FAILED" when any failed, the skip reason when they were skipped, and
"not run" when no test proved it on that kernel. Nothing in it is typed by
hand."""

import argparse
import json
import re
import sys

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


def table(reports: list[dict]) -> str:
    columns = reports[0]["columns"]
    lines = ["| kernel | userspace | tests | " + " | ".join(columns.values()) + " |",
             "|---" * (len(columns) + 3) + "|"]
    for report in sorted(reports, key=lambda r: [int(x) for x in re.findall(r"\d+", r["kernel"])[:2]]):
        cells = [cell(report["capabilities"].get(name)) for name in columns]
        # conformance.sh records the userspace and the selection (full or smoke).
        lines.append(f"| {report['kernel']} | {report.get('system') or '?'} | "
                     f"{report.get('selection') or '?'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", help="rewrite the table between the kernel-table markers here")
    parser.add_argument("reports", nargs="+")
    args = parser.parse_args()
    reports = []
    for path in args.reports:
        with open(path) as f:
            reports.append(json.load(f))
    text = table(reports)
    if not args.readme:
        print(text)
        return 0
    with open(args.readme) as f:
        readme = f.read()
    if BEGIN not in readme or END not in readme:
        print(f"{args.readme} has no {BEGIN} ... {END} section", file=sys.stderr)
        return 1
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(args.readme, "w") as f:
        f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
