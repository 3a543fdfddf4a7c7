# SPDX-License-Identifier: Apache-2.0
"""`zerolayer bench --json` keeps its keys (docs/spec.md §5.9), every one
down to the leaves, in order, whoever builds the report.

tests/fixtures/bench_report_keys.txt holds the key paths of a
`zerolayer bench --quick --json` run of all seven sections, captured before
the sections became units (issue 24): one path a line, "." between keys,
"[]" for the items of a list. tests/fixtures/bench_measured.json holds what
each section measured in such a run (lists cut to one item of each shape)
and the machine it ran on. The report is built here from those
measurements, with no kernel and no root, and its key paths must be the
captured ones. Change either file only with a change of §5.9 (a new
section's keys are its own: it records nothing here).
"""

import json
import pathlib

import pytest

from pyxdp.bench import plot, runner
from pyxdp.bench.registry import SECTIONS

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def key_paths(node, prefix: str = "") -> list[str]:
    """Every key path of NODE, in document order, each once."""
    out: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            out += [path, *key_paths(value, path)]
    elif isinstance(node, list):
        for item in node:
            out += key_paths(item, f"{prefix}[]")
    return list(dict.fromkeys(out))


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads((FIXTURES / "bench_measured.json").read_text())


@pytest.fixture(scope="module")
def report(recorded) -> dict:
    measured = {name: recorded[name] for name in SECTIONS if name in recorded}
    plan = runner.QUICK if recorded["plan"] == "quick" else runner.FULL
    built = runner.assemble(recorded["machine"], plan, measured)
    built["duration_s"] = 0.0  # run() adds it last
    return built


def test_the_report_has_every_key_it_had_in_order(report):
    expected = (FIXTURES / "bench_report_keys.txt").read_text().split()
    assert key_paths(report) == expected


def test_every_section_recorded_renders_and_draws_the_report(recorded, report, tmp_path):
    names = [name for name in SECTIONS if name in recorded]
    for name in names:
        assert SECTIONS[name].render(report).strip(), name
    png = tmp_path / "bench.png"
    plot.write(report, names, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
