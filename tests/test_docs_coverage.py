# SPDX-License-Identifier: Apache-2.0
"""Docs that cannot fall behind the code they describe: the Layout of
docs/architecture.md names every subpackage of pyxdp, found in the package
tree; docs/bench-sections.md lists every section the bench registry holds;
and no doc counts the layers (tests/test_package_layers.py's LAYERS is the
list). Each check is a function, also run on a doc with something left out,
to show that it fails then."""

import re
from pathlib import Path

import pyxdp
from pyxdp.bench.registry import SECTIONS

REPO = Path(__file__).resolve().parent.parent
ARCHITECTURE = REPO / "docs" / "architecture.md"
BENCH_SECTIONS = REPO / "docs" / "bench-sections.md"
NUMBERS = ("two three four five six seven eight nine ten eleven twelve thirteen fourteen "
           "fifteen sixteen seventeen eighteen nineteen twenty").split()


def subpackages() -> list[str]:
    """pyxdp's subpackages, from the tree (bpf and tuning are links into it)."""
    root = Path(pyxdp.__file__).parent
    found = sorted(p.parent.name for p in root.glob("*/__init__.py"))
    assert len(found) > 10, "the package was not found whole"
    return found


def unnamed_subpackages(architecture: str, names: list[str]) -> list[str]:
    """NAMES the Layout's block does not have an entry for (`  name/` under pyxdp/)."""
    layout = re.search(r"^## Layout\n+```\n(.*?)^```", architecture, re.S | re.M)
    assert layout, "docs/architecture.md has no Layout block"
    entries = set(re.findall(r"^  (\w+)/", layout.group(1), re.M))
    return [name for name in names if name not in entries]


def listed_sections(doc: str) -> list[str]:
    """The sections the opening paragraph lists, as (`a`, `b`, ...)."""
    opening = doc.split("\n## ", 1)[0]
    listed = re.search(r"\(((?:`\w+`,?\s*)+)\)", opening)
    assert listed, "docs/bench-sections.md lists no sections at its start"
    return re.findall(r"`(\w+)`", listed.group(1))


def layer_counts(doc: str) -> list[str]:
    """Where DOC says how many layers there are."""
    return re.findall(rf"\b(?:\d+|{'|'.join(NUMBERS)}) layers\b", doc, re.I)


def test_architecture_names_every_subpackage():
    assert unnamed_subpackages(ARCHITECTURE.read_text(), subpackages()) == []


def test_the_subpackage_check_sees_one_left_out():
    doc = ARCHITECTURE.read_text()
    assert "\n  streams/" in doc
    without = re.sub(r"\n  streams/.*", "", doc)
    assert unnamed_subpackages(without, subpackages()) == ["streams"]


def test_bench_sections_lists_every_registered_section_in_order():
    assert listed_sections(BENCH_SECTIONS.read_text()) == list(SECTIONS)


def test_the_section_check_sees_one_left_out():
    doc = BENCH_SECTIONS.read_text().replace(", `zerocopy`", "", 1)
    assert listed_sections(doc) == [name for name in SECTIONS if name != "zerocopy"]


def test_no_doc_counts_the_layers():
    for path in (REPO / "CONTRIBUTING.md", ARCHITECTURE, REPO / "README.md"):
        assert layer_counts(path.read_text()) == [], path.name
    assert layer_counts("`pyxdp` is twelve layers, lowest first") == ["twelve layers"]
