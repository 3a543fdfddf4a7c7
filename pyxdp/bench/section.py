# SPDX-License-Identifier: Apache-2.0
"""What a section of `zerolayer bench` is: one unit that measures, reports,
renders, draws and judges itself (docs/bench-sections.md).

The runner, the CLI and the plot know sections only through this contract
and pyxdp.bench.registry; none of them names a section's figures.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyxdp.bench.figures import figure_of

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Rig:
    """What the runner built for the sections that share the veth lab:
    the lab, zerolayer attached to its dut0 (TOKEN, a TokenProgram on its
    pins), the generator in the peer namespace (when a section chosen needs
    one) and what this section's prepare() compiled before the lab was built."""

    lab: Any
    token: Any
    generator: Any = None
    prepared: Any = None


@dataclass(frozen=True)
class Target:
    what: str
    key: str  # a ratio of the report; "parser_ratio.4" is the 4-frame entry
    op: str  # "<=" or ">="
    bound: float
    kind: str = "target"  # or "goal"
    unit: str = "x"  # what the bound and the figure are in: a ratio, or "%"


def judged(targets: list[Target], report: dict) -> list[dict]:
    """Each of TARGETS with the median measured against it in REPORT, when
    the report has its figure."""
    out = []
    for t in targets:
        fig = figure_of(report, t.key)
        if fig is None:
            continue  # the figure was skipped (the C consumer, without a compiler)
        measured = fig["median"]
        met = measured <= t.bound if t.op == "<=" else measured >= t.bound
        out.append({"what": t.what, "kind": t.kind, "key": t.key, "bound": f"{t.op} {t.bound}",
                    "measured": measured, "met": met} | ({"unit": t.unit} if t.unit != "x" else {}))
    return out


@dataclass(frozen=True)
class Section:
    """A section of the bench. Its module keeps import light (the CLI
    imports every section to list them): what measuring needs that is heavy
    (libbpf, scapy, numpy, AF_XDP) is imported inside measure."""

    name: str
    # The section's plan (a frozen dataclass with a `rounds` field), full and quick.
    full: Any
    quick: Any
    # measure(plan, rig, progress): the raw measurement. RIG is the shared
    # veth lab when on_lab, else None (the section builds what it needs).
    measure: Callable[[Any, Rig | None, Progress], Any]
    # report(plan, measured): the section's entries of the JSON report
    # (docs/spec.md §5.9), in their order.
    report: Callable[[Any, Any], dict]
    render: Callable[[dict], str]  # the text of `zerolayer bench`, from the whole report
    panel: Callable[[Any, dict], None]  # draws on a matplotlib Axes, from the whole report
    targets: Callable[[dict], list[dict]]  # judged targets and goals, from the whole report
    # What went wrong while measuring, from the whole report: the command fails on any.
    errors: Callable[[dict], list[str]] = lambda report: []
    default: bool = True  # run when no --section is given
    on_lab: bool = False  # runs on the shared veth lab
    needs_generator: bool = False  # on that lab, with the generator
    # What prepare() compiles, named on the progress line, and prepare itself:
    # run before the lab is built, its result handed to measure as rig.prepared.
    compiles: str | None = None
    prepare: Callable[[], Any] | None = None
    # CLI options of this section: option dest -> field of its plan.
    options: dict[str, str] = field(default_factory=dict)
