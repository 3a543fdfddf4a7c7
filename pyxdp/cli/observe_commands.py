# SPDX-License-Identifier: Apache-2.0
"""Watching zerolayer run: a Prometheus exporter and a live terminal view,
both for every interface with pins under /sys/fs/bpf/zerolayer/ (or, with
--netns, those of one namespace)."""

import dataclasses
import sys

import click

from pyxdp.cli.options import json_option, netns_option
from pyxdp.errors import ZerolayerError
from pyxdp.kernel.privileges import preflight

WATCHED_NETNS = ("Only the interfaces in named network namespace NS (default: the host's "
                 "and every namespace's).")


def _check_netns(netns: str | None) -> None:
    """A namespace that does not exist fails in one line, as for every command."""
    from pyxdp.kernel import netns as netns_mod

    with netns_mod.entered(netns):
        pass


@click.command()
@click.option("--listen", metavar="HOST:PORT", default="127.0.0.1:9435", show_default=True,
              help="Where to serve /metrics (port 0: a free one, which the start-up line "
                   "names). Loopback by default: put a scraper or a proxy next to it "
                   "rather than exposing it.")
@click.option("--config", "config_path", metavar="FILE", default=None,
              help="Listen where the [exporter] table of this configuration file says "
                   "(zerolayer apply's; docs/spec.md §10.1), instead of --listen.")
@click.option("--once", is_flag=True,
              help="Print the metrics once and exit (e.g. for node_exporter's textfile collector).")
@click.option("--streams", "with_streams", is_flag=True,
              help="Also observe the token streams (SSE over HTTP/1.1, plaintext and TLS) of "
                   "every process, as `zerolayer streams` does, and serve their histograms "
                   "(docs/spec.md §11.5). [streams] enabled = true in --config's file does "
                   "the same.")
@click.option("--otlp", "otlp_url", metavar="URL", default=None,
              help="With --streams: also push the streams' metrics over OTLP/HTTP "
                   "(protobuf) to URL, the receiver's metrics endpoint, e.g. "
                   "http://127.0.0.1:4318/v1/metrics (docs/spec.md §11.5).")
@click.option("--otlp-interval", type=click.FloatRange(1, 3600), default=None, metavar="SECONDS",
              help="Seconds between OTLP exports (default 15).")
@click.option("--otlp-timeout", type=click.FloatRange(1, 60), default=None, metavar="SECONDS",
              help="How long one export may take, retries included (default 10).")
@click.option("--otlp-header", "otlp_headers", multiple=True, metavar="NAME:VALUE",
              help="A header sent with each export (repeatable). Put secrets in "
                   "--otlp-headers-file instead: a command line is visible to every user.")
@click.option("--otlp-headers-file", metavar="FILE", default=None,
              help="Headers, one NAME: VALUE per line, from a file only root can write.")
@click.option("--otlp-ca", metavar="FILE", default=None,
              help="The CA certificates an https:// receiver is checked against.")
@click.option("--otlp-temporality", type=click.Choice(("cumulative", "delta")), default=None,
              help="What the receiver wants (default cumulative; Prometheus takes only "
                   "cumulative).")
@netns_option(WATCHED_NETNS)
@json_option("On start, print what is served where as one JSON object on stdout.")
@click.pass_context
def exporter(ctx, listen, config_path, once, with_streams, otlp_url, otlp_interval,
             otlp_timeout, otlp_headers, otlp_headers_file, otlp_ca, otlp_temporality, netns, as_json):
    """Serve Prometheus metrics for every interface zerolayer is attached to."""
    from pyxdp.cli.render import emit_json
    from pyxdp.observe import exporter as exporter_mod
    from pyxdp.service.config import Streams

    streams = Streams(enabled=with_streams)
    if config_path is not None:
        from pyxdp.cli.apply_commands import load_config

        if ctx.get_parameter_source("listen") is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError("give --listen or --config, not both")
        config = load_config(ctx, config_path)
        listen = config.exporter.listen
        if config.streams.enabled or with_streams:
            streams = dataclasses.replace(config.streams, enabled=True)
    otlp_given = [name for name, value in (
        ("--otlp-interval", otlp_interval), ("--otlp-timeout", otlp_timeout),
        ("--otlp-header", otlp_headers),
        ("--otlp-headers-file", otlp_headers_file), ("--otlp-ca", otlp_ca),
        ("--otlp-temporality", otlp_temporality)) if value]
    if otlp_url is not None or otlp_given:
        streams = dataclasses.replace(streams, otlp=_otlp_options(
            streams.otlp, otlp_url, otlp_interval, otlp_timeout, otlp_headers, otlp_headers_file, otlp_ca,
            otlp_temporality, otlp_given))
        if not streams.enabled:
            raise click.UsageError("--otlp pushes the streams' metrics: give --streams too")
    if once and as_json:
        raise click.UsageError("--once prints the Prometheus text format; for the same "
                               "reads as JSON run `zerolayer top --json --count 1`")
    if once and streams.enabled:
        raise click.UsageError("--streams observes streams as they pass: it needs a running "
                               "exporter, not --once")
    preflight("zerolayer exporter")
    _check_netns(netns)
    log = lambda line: click.echo(f"zerolayer exporter: {line}", err=True)  # noqa: E731
    if once:
        sys.stdout.write(exporter_mod.render(log, netns).decode())
        return

    def announce(info: dict) -> None:
        emit_json(info)
        sys.stdout.flush()  # a script waits for this line before it scrapes

    exporter_mod.serve(listen, log=log, only_netns=netns, announce=announce if as_json else None,
                       streams=streams if streams.enabled else None)


def _otlp_options(configured, url, interval, timeout, headers, headers_file, ca, temporality, given):
    """[streams.otlp] with the command line's --otlp* over it."""
    from pyxdp.streams.otlp import OtlpOptions, check_url, parse_header

    if url is None and configured is None:
        raise click.UsageError(f"{given[0]} goes with --otlp URL")
    base = configured or OtlpOptions(url)
    try:
        changes = {"url": check_url(url)} if url is not None else {}
        if headers:
            changes["headers"] = tuple(parse_header(h, "--otlp-header") for h in headers)
    except ZerolayerError as exc:
        raise click.UsageError(str(exc)) from None
    for name, value in (("interval_s", interval), ("timeout_s", timeout),
                        ("headers_file", headers_file),
                        ("ca_file", ca), ("temporality", temporality)):
        if value is not None:
            changes[name] = value
    return dataclasses.replace(base, **changes)


@click.command()
@click.option("--interval", type=click.FloatRange(0.25, 10), default=1.0, show_default=True,
              metavar="SECONDS", help="Seconds between refreshes (+ and - change it live).")
@click.option("--flows", "flows_shown", type=click.IntRange(1, 100), default=5, show_default=True,
              metavar="N", help="Flows shown per interface.")
@click.option("--count", type=click.IntRange(1), default=None, metavar="N",
              help="With --json: stop after N lines.")
@netns_option(WATCHED_NETNS)
@json_option("One JSON object per interval, with the rates over it, instead of the screen "
             "(no terminal needed).")
def top(interval, flows_shown, count, netns, as_json):
    """A live view of every attached interface: rates, top flows, token gaps.

    q or Ctrl-C quits."""
    from pyxdp.errors import ZerolayerError
    from pyxdp.observe import top as top_mod

    if count is not None and not as_json:
        raise click.UsageError("--count goes with --json")
    preflight("zerolayer top")
    _check_netns(netns)
    if as_json:
        from pyxdp.cli.render import emit_json

        for line in top_mod.json_lines(interval, flows_shown, count, netns):
            emit_json(line)
            sys.stdout.flush()
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise ZerolayerError("top needs a terminal: for scripts use `zerolayer top --json`, "
                             "`zerolayer stats IFACE --flows --json` or `zerolayer exporter --once`")
    top_mod.run(interval, flows_shown, netns)


COMMANDS = [exporter, top]
