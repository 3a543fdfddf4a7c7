# SPDX-License-Identifier: Apache-2.0
"""What the sections' plot panels share: the colours, a bar with its
whisker, and the ratio and verdicts written under a panel. Each function
draws on a matplotlib Axes it is given: nothing here imports matplotlib."""

from pyxdp.bench.figures import figure_of

ZEROLAYER, FLOOR, C_CEILING = "#1f77b4", "#b0b0b0", "#2ca02c"


def bar(ax, x, fig, color, label, scale=1.0, width=0.38):
    """A bar at the median, a whisker from min to max, the median above it."""
    median, top = fig["median"] / scale, fig["max"] / scale
    err = [[median - fig["min"] / scale], [top - median]]
    ax.bar(x, median, width=width, color=color, label=label, yerr=err, capsize=3)
    text = f"{median:,.1f}" if scale == 1.0 else f"{median:,.2f}"
    ax.annotate(text, (x, top), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)


def verdicts(report, key) -> str:
    return "; ".join(f"{t['kind']} {t['bound']}: {'met' if t['met'] else 'MISSED'}"
                     for t in report["targets"] if t["key"] == key)


def ratio_note(ax, report, key, text):
    """The ratio under a panel, with each target and goal on it and whether it was met."""
    fig = figure_of(report, key)
    assert fig is not None  # a panel is drawn only for a section that ran
    ax.set_xlabel(f"{text}{fig['median']:.2f}x (min {fig['min']:.2f}, max {fig['max']:.2f})\n"
                  + verdicts(report, key), fontsize=8)
