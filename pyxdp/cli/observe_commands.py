"""Watching zerolayer run: a Prometheus exporter and a live terminal view,
both for every interface with pins under /sys/fs/bpf/zerolayer/."""

import sys

import click

from pyxdp.kernel.privileges import preflight


@click.command()
@click.option("--listen", metavar="HOST:PORT", default="127.0.0.1:9435", show_default=True,
              help="Where to serve /metrics. Loopback by default: put a scraper or a proxy "
                   "next to it rather than exposing it.")
@click.option("--once", is_flag=True,
              help="Print the metrics once and exit (e.g. for node_exporter's textfile collector).")
def exporter(listen, once):
    """Serve Prometheus metrics for every interface zerolayer is attached to."""
    from pyxdp.observe import exporter as exporter_mod

    preflight("zerolayer exporter")
    log = lambda line: click.echo(f"zerolayer exporter: {line}", err=True)  # noqa: E731
    if once:
        sys.stdout.write(exporter_mod.render(log).decode())
        return
    exporter_mod.serve(listen, log=log)


@click.command()
@click.option("--interval", type=click.FloatRange(0.25, 10), default=1.0, show_default=True,
              metavar="SECONDS", help="Seconds between refreshes (+ and - change it live).")
@click.option("--flows", "flows_shown", type=click.IntRange(1, 100), default=5, show_default=True,
              metavar="N", help="Flows shown per interface.")
def top(interval, flows_shown):
    """A live view of every attached interface: rates, top flows, token gaps.

    q or Ctrl-C quits."""
    from pyxdp.errors import ZerolayerError
    from pyxdp.observe import top as top_mod

    preflight("zerolayer top")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise ZerolayerError("top needs a terminal: for scripts use "
                             "`zerolayer stats IFACE --flows --json` or `zerolayer exporter --once`")
    top_mod.run(interval, flows_shown)


COMMANDS = [exporter, top]
