# SPDX-License-Identifier: Apache-2.0
"""Plain-text rendering shared by the commands: JSON, counters, and XDP's
counters against the reference judge."""

import json
import sys

from pyxdp.human import number, table


def emit_json(obj) -> None:
    """OBJ as one line of JSON on stdout, flushed (as click.echo does, for a
    fraction of its cost: the streams observer writes one per stream)."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def write_lines(lines: list[str], tty: bool) -> None:
    """Print LINES (each with its newline) on stdout. On a terminal one at a
    time, each flushed as it comes; elsewhere in one write, flushed once, so
    a pipe or file gets each batch whole, at once, for one system call."""
    if tty:
        for line in lines:
            sys.stdout.write(line)
            sys.stdout.flush()
    else:
        sys.stdout.write("".join(lines))
        sys.stdout.flush()


def counters_table(nested: dict, rates: dict | None = None) -> str:
    """The counters of `zerolayer stats`, grouped as in the JSON."""
    rows = []
    for key, value in nested.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                rows.append([f"{key}.{sub}", number(v)]
                            + ([f"{number(rates[key][sub])}/s"] if rates else []))
        else:
            rows.append([key, number(value)] + ([f"{number(rates[key])}/s"] if rates else []))
    headers = ["COUNTER", "TOTAL"] + (["RATE"] if rates else [])
    return table(headers, rows)


def judged_table(counted: dict, expected: dict) -> str:
    """Each XDP counter of dut0 next to the reference judge's expectation."""
    rows = [[k, number(counted[k]), number(expected[k]),
             "" if counted[k] == expected[k] else "MISMATCH"] for k in counted]
    return ("XDP counters on dut0, against the reference judge's expectation:\n"
            + table(["COUNTER", "COUNTED", "EXPECTED", ""], rows))
