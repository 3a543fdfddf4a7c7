# SPDX-License-Identifier: Apache-2.0
"""The PNG of `zerolayer bench --plot`: one panel per section run,
zerolayer's bar next to its floor, the median as the bar and min..max as
the whisker.

matplotlib is the optional [plot] extra: it is imported only here, and only
inside the functions, so that nothing else needs it installed."""

import sys

from pyxdp.bench import TIERS, delivery_keys
from pyxdp.bench.figures import figure_of
from pyxdp.errors import ZerolayerError

ZEROLAYER, FLOOR, C_CEILING = "#1f77b4", "#b0b0b0", "#2ca02c"


def require_matplotlib() -> None:
    """Raise, saying how to install it, unless matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ZerolayerError(
            "--plot needs matplotlib, zerolayer's optional [plot] extra: "
            f"{sys.executable} -m pip install 'matplotlib>=3.7,<4'"
        ) from None


def _bar(ax, x, fig, color, label, scale=1.0, width=0.38):
    """A bar at the median, a whisker from min to max, the median above it."""
    median, top = fig["median"] / scale, fig["max"] / scale
    err = [[median - fig["min"] / scale], [top - median]]
    ax.bar(x, median, width=width, color=color, label=label, yerr=err, capsize=3)
    text = f"{median:,.1f}" if scale == 1.0 else f"{median:,.2f}"
    ax.annotate(text, (x, top), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)


def _verdicts(report, key) -> str:
    return "; ".join(f"{t['kind']} {t['bound']}: {'met' if t['met'] else 'MISSED'}"
                     for t in report["targets"] if t["key"] == key)


def _ratio_note(ax, report, key, text):
    """The ratio under a panel, with each target and goal on it and whether it was met."""
    fig = figure_of(report, key)
    assert fig is not None  # a panel is drawn only for a section that ran
    ax.set_xlabel(f"{text}{fig['median']:.2f}x (min {fig['min']:.2f}, max {fig['max']:.2f})\n"
                  + _verdicts(report, key), fontsize=8)


def _parser_panel(ax, report):
    counts = list(report["parser_ns"])
    for i, n in enumerate(counts):
        _bar(ax, i - 0.2, report["parser_ns"][n], ZEROLAYER, "zerolayer" if i == 0 else None)
        _bar(ax, i + 0.2, report["pass_floor_ns"][n], FLOOR, "XDP_PASS floor" if i == 0 else None)
    ax.set_xticks(range(len(counts)), [f"{n} frame{'s' if n != '1' else ''}" for n in counts])
    ax.set_title("Parser cost, ns per datagram (lower is better)", fontsize=10)
    _ratio_note(ax, report, "parser_ratio.4", "ratio at 4 frames: ")
    ax.legend(fontsize=8)


def _xdp_panel(ax, report):
    _bar(ax, 0, report["zerolayer_dps"], ZEROLAYER, None, 1e6)
    _bar(ax, 1, report["pass_counter_dps"], FLOOR, None, 1e6)
    ax.set_xticks([0, 1], ["zerolayer", "count-and-pass"])
    ax.set_title(f"XDP path on veth ({report['xdp_mode']}), M datagrams/s", fontsize=10)
    _ratio_note(ax, report, "xdp_ratio", "ratio: ")


def _delivery_panel(ax, report):
    """pyxdp and the UDP socket side by side at each tier, the C consumer
    beside them at the touch tier."""
    for i, tier in enumerate(TIERS):
        keys = delivery_keys(tier)
        _bar(ax, i - 0.28, report[keys["xsk"]], ZEROLAYER,
             f"pyxdp, AF_XDP ({report['xsk_mode']})" if i == 0 else None, 1e6, 0.27)
        _bar(ax, i, report[keys["udp"]], FLOOR, "UDP socket" if i == 0 else None, 1e6, 0.27)
    if report["c_touch_fps"] is not None:
        _bar(ax, TIERS.index("touch") + 0.28, report["c_touch_fps"], C_CEILING,
             f"C on libxdp, AF_XDP ({report['c_consumer']['mode']})", 1e6, 0.27)
    ax.set_xticks(range(len(TIERS)), list(TIERS))
    ax.set_title("Delivery into Python by work per frame, M frames/s", fontsize=10)
    notes = []
    for key, text in (("delivery_touch_ratio", "touch, pyxdp/UDP: "),
                      ("xsk_touch_vs_c_ratio", "touch, pyxdp/C: ")):
        fig = figure_of(report, key)
        if fig is not None:
            notes.append(f"{text}{fig['median']:.2f}x; {_verdicts(report, key)}")
    if report["c_consumer"]["skipped"]:
        notes.append(f"C consumer skipped: {report['c_consumer']['skipped']}")
    ax.set_xlabel("\n".join(notes), fontsize=8)
    ax.legend(fontsize=7)


def _forward_panel(ax, report):
    _bar(ax, 0, report["xdp_forward_dps"], ZEROLAYER, None, 1e6)
    _bar(ax, 1, report["kernel_forward_dps"], FLOOR, None, 1e6)
    _bar(ax, 2, report["kernel_judged_forward_dps"], FLOOR, None, 1e6)
    ax.set_xticks([0, 1, 2], ["XDP forwarding", "kernel", "kernel behind\nthe judge"])
    ax.set_title(f"Forwarding through a router ({report['forward_mode']}), M datagrams/s",
                 fontsize=10)
    _ratio_note(ax, report, "forward_ratio", "XDP / kernel: ")


def _relay_panel(ax, report):
    results = report["relay"]["results"]
    counts = [n for n in results if {"sockmap", "asyncio"} <= results[n]["ways"].keys()]
    ratios, verdicts = [], []
    for i, n in enumerate(counts):
        ways = results[n]["ways"]
        _bar(ax, i - 0.2, ways["sockmap"]["frames_per_s"], ZEROLAYER,
             "sockmap relay" if i == 0 else None, 1e6)
        _bar(ax, i + 0.2, ways["asyncio"]["frames_per_s"], FLOOR,
             "asyncio relay" if i == 0 else None, 1e6)
        key = f"relay.results.{n}.sockmap_ratio.throughput_vs_asyncio"
        ratio = figure_of(report, key)
        if ratio is not None:
            ratios.append(f"{n}: {ratio['median']:.2f}x")
            verdicts.append(f"{n}: {_verdicts(report, key)}")
    ax.set_xticks(range(len(counts)), [f"{n} stream{'s' if n != '1' else ''}" for n in counts])
    ax.set_title("TCP relay on loopback, M frames/s", fontsize=10)
    ax.set_xlabel("ratio by streams, " + ", ".join(ratios) + "\n" + "; ".join(verdicts),
                  fontsize=8)
    if counts:
        ax.legend(fontsize=8)


def _tx_panel(ax, report):
    sinks = list(report["tx_dps"])
    colors = {"tokensender": ZEROLAYER, "sendto": FLOOR, "sendmmsg": C_CEILING}
    for i, sink in enumerate(sinks):
        for j, (name, fig) in enumerate(report["tx_dps"][sink].items()):
            label = (f"TokenSender, AF_XDP ({report['tx_mode']})" if name == "tokensender"
                     else name) if i == 0 else None
            _bar(ax, i + (j - 1) * 0.28, fig, colors[name], label, 1e6, 0.27)
    ax.set_xticks(range(len(sinks)), [f"sink {s}" for s in sinks])
    ax.set_title("Sending on veth, M datagrams/s at dut0", fontsize=10)
    _ratio_note(ax, report, "tx_ratio.xdp.vs_sendto", "TokenSender / sendto, sink xdp: ")
    ax.legend(fontsize=7)


def _core_panel(ax, report):
    c = report["core"]
    colors = {"pure": FLOOR, "compiled": ZEROLAYER}
    width = 0.8 / (2 * len(c["cores"]))
    for i, n in enumerate(c["sizes"]):
        for j, (path, name) in enumerate((p, k) for p in ("rx", "tx") for k in c["cores"]):
            fig = {k: v / 1000 for k, v in c[name][path]["batch_ns"][str(n)].items()
                   if k in ("median", "min", "max")}
            label = f"{'receive' if path == 'rx' else 'send'}, {name}" if i == 0 else None
            _bar(ax, i + (j - 1.5) * width, fig, colors[name], label, 1.0, width * 0.95)
            ax.patches[-1].set_hatch("//" if path == "tx" else "")
    ax.set_xticks(range(len(c["sizes"])), [f"{n} a batch" for n in c["sizes"]])
    ax.set_yscale("log")
    ax.set_title("Python paths, us per batch (lower is better)", fontsize=10)
    ax.legend(fontsize=7)


# Each section's panel, and the key of the report that says the section ran.
PANELS = [("parser_ns", _parser_panel), ("zerolayer_dps", _xdp_panel),
          ("xsk_fps", _delivery_panel), ("tx_dps", _tx_panel),
          ("xdp_forward_dps", _forward_panel), ("relay", _relay_panel), ("core", _core_panel)]


def write(report: dict, path: str) -> None:
    """Draw REPORT (the dict of pyxdp.bench.runner.run) into PATH."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    panels = [draw for key, draw in PANELS if key in report]
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
