# SPDX-License-Identifier: Apache-2.0
"""`zerolayer demo` and `zerolayer replay`: traffic on a lab the command
builds and removes itself (or, for replay, into an interface you name),
with what XDP counted against the reference judge."""

import click

from pyxdp.cli.options import json_option, netns_option
from pyxdp.cli.render import emit_json, judged_table
from pyxdp.human import number, table
from pyxdp.kernel.privileges import preflight


@click.command()
@click.option("--streams", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Concurrent token streams to replay.")
def demo(streams):
    """Attach to a veth lab, replay token streams, show what XDP counted."""
    from pyxdp.lab import demo as demo_mod

    preflight("zerolayer demo")
    report = demo_mod.run(streams=streams, progress=click.echo)

    xsk = report.xsk
    click.echo(f"\nstreams received by the AF_XDP socket on {xsk['interface']} "
               f"queue {xsk['queue']} ({xsk['mode']} mode; {report.datagrams_received} datagrams, "
               f"{xsk['statistics']['rx_dropped'] + xsk['statistics']['rx_ring_full']} lost):")
    for s in report.streams:
        state = "DONE" if s.done else "unfinished"
        click.echo(f"  {s.flow:<24} {s.prompt!r} -> {s.text!r} ({s.tokens} tokens, {state})")

    late = report.replay
    click.echo(f"\ntoken cadence per stream, measured by XDP at the driver (replay left "
               f"{late.get('late_median_ms', 0):.2f} ms late at the median, "
               f"{late.get('late_max_ms', 0):.2f} ms at worst):")
    rows = []
    for f in report.flows:
        gaps = f["gap_us"] or {}
        rows.append([f"{f['src']}", f["frames"]["token"], f["avg_tokens_per_s"],
                     *(_gap(gaps.get(q)) for q in ("p50", "p90", "p99"))])
    click.echo(table(["FLOW", "TOKENS", "AVG TOKENS/S", "GAP P50", "GAP P90", "GAP P99"], rows))
    click.echo("  (gaps are log2 buckets: '<32.8ms' means between 16.4 and 32.8 ms)")

    click.echo("\n" + judged_table(report.counters, report.expected))
    demo_mod.check(report)
    click.echo("\nevery counter matches the reference judge; "
               "socket closed, program detached, lab removed")


def _gap(le_us) -> str:
    """A bucket's upper edge in µs, as a person reads it."""
    if le_us is None:
        return "-"
    return f"<{le_us / 1000:.1f}ms" if le_us >= 1000 else f"<{le_us}us"


@click.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("--iface", metavar="IFACE", default=None,
              help="Send out of IFACE. Without it, replay into a lab built for the run.")
@netns_option()
@click.option("--speed", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Speed-up factor on the recorded cadence.")
@click.option("--topspeed", is_flag=True, help="Ignore the cadence: send as fast as possible.")
@click.option("--streams", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="Copies of the recording played at once.")
@click.option("--port", type=click.IntRange(1, 65535), default=9977, show_default=True,
              help="Token port (destination of transcript datagrams; zerolayer's port in a lab).")
@click.option("--dst", "destinations", metavar="ADDRESS", multiple=True,
              help="With --iface, a transcript's destination (one IPv4, one IPv6).")
@click.option("--dst-mac", metavar="MAC", default=None,
              help="With --iface, the destination MAC (default: the neighbour entry).")
@json_option()
def replay(source, iface, netns, speed, topspeed, streams, port, destinations, dst_mac, as_json):
    """Replay a pcap or a JSONL transcript of token streams, with its cadence.

    SOURCE is a capture (pcap/pcapng of Ethernet frames, sent byte for byte)
    or a transcript: one JSON object per line, a request and its tokens with
    timestamps (see examples/transcript.jsonl)."""
    from pyxdp.lab import replay as replay_mod

    if not iface and (netns or destinations or dst_mac):
        raise click.UsageError("--netns, --dst and --dst-mac go with --iface")
    pace = None if topspeed else speed
    if iface:
        route = None
        if replay_mod.source_format(source) == "jsonl":
            route = replay_mod.route_from_interface(iface, netns, destinations, dst_mac)
        timeline = replay_mod.load(source, route, streams=streams, port=port)
        result = replay_mod.replay_packets(timeline, iface, netns, speed=pace, streams=streams)
        if as_json:
            emit_json({"source": source, **result.to_json()})
        else:
            click.echo(_replay_line(result))
        return

    preflight("zerolayer replay")
    say = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    report = replay_mod.replay_in_lab(source, streams=streams, speed=pace, port=port, progress=say)
    if as_json:
        emit_json({"source": source, **report.to_json()})
    else:
        click.echo(_replay_line(report.result))
        click.echo("\n" + judged_table(report.counters, report.expected))
    report.check()


def _replay_line(res) -> str:
    where = f"{res.interface}" + (f" (netns {res.netns})" if res.netns else "")
    if res.speed is None:
        pace = "at top speed"
    else:
        pace = (f"over {res.elapsed_s:.3f} s (recording: {res.span_s:.3f} s at {res.speed:g}x); "
                f"frames left {res.late_median_ms:.3f} ms late (median), "
                f"{res.late_max_ms:.3f} ms at most")
    return (f"replayed {number(res.sent)} frames ({number(res.bytes)} bytes, {res.streams} "
            f"stream{'s' if res.streams != 1 else ''}) out of {where} {pace}")


COMMANDS = [demo, replay]
