# SPDX-License-Identifier: Apache-2.0
"""The PNG of `zerolayer bench --plot`: one panel per section run,
zerolayer's bar next to its floor, the median as the bar and min..max as
the whisker.

matplotlib is the optional [plot] extra: it is imported only here, and only
inside the functions, so that nothing else needs it installed."""

import sys
from collections.abc import Collection

from pyxdp.bench.registry import SECTIONS
from pyxdp.errors import ZerolayerError


def require_matplotlib() -> None:
    """Raise, saying how to install it, unless matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ZerolayerError(
            "--plot needs matplotlib, zerolayer's optional [plot] extra: "
            f"{sys.executable} -m pip install 'matplotlib>=3.7,<4'"
        ) from None


def write(report: dict, sections: Collection[str], path: str) -> None:
    """Draw REPORT (the dict of pyxdp.bench.runner.run over SECTIONS) into
    PATH, a panel per section, each drawn by its section."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    panels = [s.panel for name, s in SECTIONS.items() if name in sections]
    # at least wide enough for the title when one panel is drawn
    fig, axes = plt.subplots(1, len(panels), figsize=(max(4.7 * len(panels), 7.0), 5),
                             squeeze=False)
    for ax, draw in zip(axes[0], panels):
        draw(ax, report)

    m = report["machine"]
    where = f"{m.get('cpu_model') or m['arch']}, {m['cpus']} CPUs, Linux {m['kernel']}"
    if m.get("virtualized"):
        where += ", virtualized"
    mode = " (quick mode: not for quoting)" if report["quick"] else ""
    fig.suptitle(f"zerolayer bench{mode}: median of rounds, whiskers min..max\n{where}",
                 fontsize=10)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise ZerolayerError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        plt.close(fig)
