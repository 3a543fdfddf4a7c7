"""The PNG of `zerolayer bench --plot`: one panel per section, zerolayer's
bar next to its floor, the median as the bar and min..max as the whisker."""

from pyxdp.bench.runner import figure_of
from pyxdp.errors import ZerolayerError

ZEROLAYER, FLOOR = "#1f77b4", "#b0b0b0"


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ZerolayerError(
            "--plot needs matplotlib: /opt/zerolayer/venv/bin/pip install matplotlib"
        ) from None


def _bar(ax, x, fig, color, label, scale=1.0):
    """A bar at the median, a whisker from min to max, the median above it."""
    median, top = fig["median"] / scale, fig["max"] / scale
    err = [[median - fig["min"] / scale], [top - median]]
    ax.bar(x, median, width=0.38, color=color, label=label, yerr=err, capsize=3)
    text = f"{median:,.1f}" if scale == 1.0 else f"{median:,.2f}"
    ax.annotate(text, (x, top), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)


def _ratio_note(ax, report, key, text):
    """The ratio under a panel, with each target and goal on it and whether it was met."""
    fig = figure_of(report, key)
    verdicts = [f"{t['kind']} {t['bound']}: {'met' if t['met'] else 'MISSED'}"
                for t in report["targets"] if t["key"] == key]
    ax.set_xlabel(f"{text}{fig['median']:.2f}x (min {fig['min']:.2f}, max {fig['max']:.2f})\n"
                  + "; ".join(verdicts), fontsize=8)


def write(report: dict, path: str) -> None:
    """Draw REPORT (the dict of pyxdp.bench.run) into PATH."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (parser, xdp, delivery) = plt.subplots(1, 3, figsize=(14, 5))

    counts = list(report["parser_ns"])
    for i, n in enumerate(counts):
        _bar(parser, i - 0.2, report["parser_ns"][n], ZEROLAYER, "zerolayer" if i == 0 else None)
        _bar(parser, i + 0.2, report["pass_floor_ns"][n], FLOOR,
             "XDP_PASS floor" if i == 0 else None)
    parser.set_xticks(range(len(counts)), [f"{n} frame{'s' if n != '1' else ''}" for n in counts])
    parser.set_title("Parser cost, ns per datagram (lower is better)", fontsize=10)
    _ratio_note(parser, report, "parser_ratio.4", "ratio at 4 frames: ")
    parser.legend(fontsize=8)

    _bar(xdp, 0, report["zerolayer_dps"], ZEROLAYER, None, 1e6)
    _bar(xdp, 1, report["pass_counter_dps"], FLOOR, None, 1e6)
    xdp.set_xticks([0, 1], ["zerolayer", "count-and-pass"])
    xdp.set_title(f"XDP path on veth ({report['xdp_mode']}), M datagrams/s", fontsize=10)
    _ratio_note(xdp, report, "xdp_ratio", "ratio: ")

    _bar(delivery, 0, report["xsk_fps"], ZEROLAYER, None, 1e6)
    _bar(delivery, 1, report["udp_fps"], FLOOR, None, 1e6)
    delivery.set_xticks([0, 1], [f"AF_XDP ({report['xsk_mode']})", "UDP recv_into"])
    delivery.set_title("Delivery into Python, M frames/s", fontsize=10)
    _ratio_note(delivery, report, "delivery_ratio", "ratio: ")

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
