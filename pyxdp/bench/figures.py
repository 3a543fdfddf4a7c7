# SPDX-License-Identifier: Apache-2.0
"""A figure of the bench: the median of its rounds, with min and max."""

import statistics
from collections.abc import Iterable


def figure(values: Iterable[float]) -> dict:
    """The median of the rounds, with min, max and the rounds themselves."""
    floats = [float(v) for v in values]
    return {"median": statistics.median(floats), "min": min(floats), "max": max(floats),
            "rounds": len(floats), "values": [round(v, 4) for v in floats]}


def figure_of(report: dict, key: str) -> dict | None:
    """The figure a dotted KEY names in REPORT ("parser_ratio.4": the 4-frame
    entry of parser_ratio), or None when the report has no such entry."""
    node = report
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def cells(fig: dict, fmt: str = "{:,.1f}") -> list[str]:
    """A figure's median, min and max as table cells, formatted with FMT."""
    return [fmt.format(fig["median"]), fmt.format(fig["min"]), fmt.format(fig["max"])]
