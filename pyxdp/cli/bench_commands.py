# SPDX-License-Identifier: Apache-2.0
"""`zerolayer bench` and `zerolayer replay`: measurements and traffic, each on
a lab it builds itself (or, for the bench's relay section, on loopback; for
replay, into an interface you name)."""

import os

import click

from pyxdp.bench import (
    DEFAULT_SECTIONS,
    SECTIONS,
    TIER_WORK,
    TIERS,
    TX_DATAGRAMS,
    TX_QUICK_DATAGRAMS,
    delivery_keys,
)
from pyxdp.bench import delivery as bench_delivery
from pyxdp.bench import relay as bench_relay
from pyxdp.cli.options import json_option, netns_option
from pyxdp.cli.render import emit_json, table
from pyxdp.errors import ZerolayerError
from pyxdp.human import number
from pyxdp.kernel.privileges import preflight


def _check_writable(path: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise click.BadParameter(f"cannot write into {parent}", param_hint="--plot")


@click.command()
@click.option("--section", "sections", metavar="NAME", multiple=True,
              type=click.Choice(SECTIONS),
              help=f"Run this section; repeat for more ({', '.join(SECTIONS)}). "
                   f"Default: {', '.join(DEFAULT_SECTIONS)}.")
@json_option()
@click.option("--plot", "plot_path", metavar="FILE.png", default=None,
              help="Also draw the results, side by side, into a PNG (needs the [plot] extra).")
@click.option("--quick", is_flag=True,
              help="Fewer, shorter rounds: every figure, none worth quoting (for CI).")
@click.option("--rounds", metavar="N", type=click.IntRange(1, 1000), default=None,
              help="Rounds of every section run (default: each section's own).")
@click.option("--delivery-frames", metavar="N", type=click.IntRange(min=1000), default=None,
              help="delivery: datagrams offered to each consumer at each tier (default "
                   f"{bench_delivery.FRAMES:,}; {bench_delivery.QUICK_FRAMES:,} with --quick).")
@click.option("--tx-datagrams", metavar="N", type=click.IntRange(min=1000), default=None,
              help="tx: datagrams each sender sends per round (default "
                   f"{TX_DATAGRAMS:,}; {TX_QUICK_DATAGRAMS:,} with --quick).")
@click.option("--relay-streams", metavar="N", type=click.IntRange(1, 1024), multiple=True,
              help="relay: concurrent streams of a run; repeat for more (default "
                   f"{', '.join(map(str, bench_relay.FULL.streams))}).")
@click.option("--relay-frames", metavar="N", type=click.IntRange(min=1000), default=None,
              help="relay: frames of a flood, all streams together (default "
                   f"{bench_relay.FULL.flood_frames:,}; {bench_relay.QUICK.flood_frames:,} "
                   "with --quick).")
def bench(sections, as_json, plot_path, quick, rounds, delivery_frames, tx_datagrams,
          relay_streams, relay_frames):
    """Measure zerolayer against its floors, side by side: on a veth lab it
    builds itself (sections parser, xdp, delivery), on a routed lab of three
    namespaces (forward) and on loopback (relay)."""
    sections = sections or DEFAULT_SECTIONS
    for given, option, section in [(delivery_frames is not None, "--delivery-frames", "delivery"),
                                   (tx_datagrams is not None, "--tx-datagrams", "tx"),
                                   (relay_streams, "--relay-streams", "relay"),
                                   (relay_frames is not None, "--relay-frames", "relay")]:
        if given and section not in sections:
            raise click.UsageError(f"{option} goes with --section {section}")
    if plot_path:
        from pyxdp.bench.plot import require_matplotlib

        _check_writable(plot_path)
        require_matplotlib()  # before minutes of measuring, not after
    from pyxdp.bench import runner as bench_mod

    preflight("zerolayer bench")
    plan = bench_mod.plan(quick, rounds=rounds, delivery_frames=delivery_frames,
                          relay_streams=relay_streams, relay_frames=relay_frames,
                          tx_datagrams=tx_datagrams)
    say = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    report = bench_mod.run(sections, plan, progress=say)
    if plot_path:
        from pyxdp.bench.plot import write

        write(report, plot_path)
        report["plot"] = plot_path
    if as_json:
        emit_json(report)
    else:
        click.echo("")
        click.echo(_render(report))
        if plot_path:
            click.echo(f"\nplot: {plot_path}")
    errors = report.get("relay", {}).get("errors")
    if errors:
        raise ZerolayerError(f"the relay section went wrong ({len(errors)} error"
                             f"{'s' if len(errors) > 1 else ''}): {'; '.join(errors)}")


def _fig(f, fmt="{:,.1f}") -> list[str]:
    return [fmt.format(f["median"]), fmt.format(f["min"]), fmt.format(f["max"])]


def _render(r: dict) -> str:
    m = r["machine"]
    where = (f"{m.get('cpu_model') or m['arch']}, {m['cpus']} CPUs, Linux {m['kernel']}"
             + (", virtualized" if m.get("virtualized") else ""))
    out = [f"zerolayer bench{' (quick: not for quoting)' if r['quick'] else ''} on {where}, "
           f"{r['duration_s']} s; medians of rounds, with min and max"]
    sections = [(key, draw) for key, draw in RENDERERS if key in r]
    for i, (_, draw) in enumerate(sections, 1):
        out += ["", f"{i}. " + draw(r)]

    out += ["", "Targets"]
    for t in r["targets"]:
        verdict = "met" if t["met"] else "not reached" if t["kind"] == "goal" else "MISSED"
        out.append(f"  {t['kind']:<6} {t['what']}: {t['bound']}x, "
                   f"measured {t['measured']:.2f}x: {verdict}")
    return "\n".join(out)


def _parser(r: dict) -> str:
    rows = []
    for n in r["parser_ns"]:
        rows.append([n, *_fig(r["parser_ns"][n]), *_fig(r["pass_floor_ns"][n]),
                     *_fig(r["parser_ratio"][n], "{:.2f}x")])
    return "\n".join([
        "Parser cost, ns per datagram, BPF_PROG_TEST_RUN",
        f"   ({r['parser_method']})",
        table(["FRAMES", "ZEROLAYER", "MIN", "MAX", "XDP_PASS", "MIN", "MAX",
               "RATIO", "MIN", "MAX"], rows)])


def _xdp(r: dict) -> str:
    return "\n".join([
        f"XDP path on veth, {r['xdp_mode']} mode, datagrams/s counted on dut0 ({r['xdp_load']})",
        table(["PROGRAM", "MEDIAN", "MIN", "MAX"], [
            ["zerolayer", *_fig(r["zerolayer_dps"], "{:,.0f}")],
            ["count-and-pass", *_fig(r["pass_counter_dps"], "{:,.0f}")],
            ["ratio", *_fig(r["xdp_ratio"], "{:.2f}x")],
        ]),
        f"generator: {r['generator_pps']:,.0f} frames/s flat out; dut0 saw "
        f"{number(r['seen_by_dut'])} of {number(r['generator_sent'])} frames sent"])


def _delivery(r: dict) -> str:
    runs = r["delivery_last_round"]["runs"]

    def row(tier: str, side: str, name: str, fps: dict, lost: dict) -> list[str]:
        return [tier, name, *_fig(fps, "{:,.0f}"), number(lost["median"]),
                runs[f"{side}_{tier}"]["limited_by"]]

    rows = []
    for tier in TIERS:
        keys = delivery_keys(tier)
        rows += [row(tier, "xsk", f"AF_XDP, pyxdp ({r['xsk_mode']} mode)", r[keys["xsk"]],
                     r[keys["xsk_lost"]]),
                 row(tier, "udp", "UDP socket", r[keys["udp"]], r[keys["udp_lost"]]),
                 [tier, "pyxdp / UDP", *_fig(r[keys["ratio"]], "{:.2f}x"), "", ""]]
        if tier == "touch" and r["c_touch_fps"] is not None:
            rows += [row(tier, "c", f"AF_XDP, C on libxdp ({r['c_consumer']['mode']} mode)",
                         r["c_touch_fps"], r["c_touch_lost"]),
                     [tier, "pyxdp / C", *_fig(r["xsk_touch_vs_c_ratio"], "{:.2f}x"), "", ""]]
    out = [f"Delivery into Python, frames/s ({number(r['delivery_frames_offered'])} offered "
           f"per consumer and round: {r['delivery_load']})",
           table(["TIER", "CONSUMER", "MEDIAN", "MIN", "MAX", "LOST (MEDIAN)",
                  "LIMITED BY (LAST ROUND)"], rows)]
    out += [f"   {tier}: {TIER_WORK[tier]}" for tier in TIERS]
    out.append("   limited by: sender, the consumer lost at most 0.1% and could take more; "
               "consumer, it could not keep up")
    skipped = r["c_consumer"]["skipped"]
    if skipped:
        out.append(f"   C consumer skipped: {skipped}")
    return "\n".join(out)


def _tx(r: dict) -> str:
    out = [f"Sending, datagrams/s counted at dut0 ({number(r['tx_datagrams'])} per sender and "
           f"round: {r['tx_load']}), senders pinned to CPU {r['tx_cpu']}"]
    for sink, about in r["tx_sinks"].items():
        runs = r["tx_last_round"][sink]["runs"]
        rows = []
        for name, fig in r["tx_dps"][sink].items():
            cpu = runs[name]["cpu"] or {}
            label = f"TokenSender (AF_XDP, {r['tx_mode']} mode)" if name == "tokensender" \
                else name
            rows.append([label, *_fig(fig, "{:,.0f}"), number(r["tx_lost"][sink][name]["median"]),
                         f"{cpu.get('busy', 0):.0%} / {cpu.get('softirq', 0):.0%}"])
        for key, fig in r["tx_ratio"][sink].items():
            rows.append([f"TokenSender / {key.removeprefix('vs_')}", *_fig(fig, "{:.2f}x"), "", ""])
        out += [f"sink {sink}: {about['work']}",
                table(["SENDER", "MEDIAN", "MIN", "MAX", "LOST (MEDIAN)",
                       "CPU BUSY / SOFTIRQ (LAST ROUND)"], rows)]
    out.append("   veth runs dut0's receive work on the sending CPU, inside the send: it costs "
               "every sender alike")
    return "\n".join(out)


def _forward(r: dict) -> str:
    return "\n".join([
        f"Forwarding through a router on veth, {r['forward_mode']} mode, datagrams/s counted "
        f"at the receiver ({r['forward_load']})",
        table(["ROUTER", "MEDIAN", "MIN", "MAX"], [
            ["zerolayer XDP forwarding", *_fig(r["xdp_forward_dps"], "{:,.0f}")],
            ["kernel IP forwarding", *_fig(r["kernel_forward_dps"], "{:,.0f}")],
            ["kernel, behind zerolayer's judge", *_fig(r["kernel_judged_forward_dps"],
                                                       "{:,.0f}")],
            ["XDP / kernel", *_fig(r["forward_ratio"], "{:.2f}x")],
            ["XDP / kernel behind the judge", *_fig(r["forward_judged_ratio"], "{:.2f}x")],
        ]),
        f"generator: {r['forward_generator_pps']:,.0f} frames/s flat out; the receiver counted "
        f"{number(r['forward_received'])} of {number(r['forward_generator_sent'])} sent, "
        f"{number(r['forward_router_forwarded'])} of them forwarded by XDP"])


def _relay(r: dict) -> str:
    relay = r["relay"]
    load = relay["load"]
    out = [f"TCP relay on loopback, {load['frame_bytes']}-byte frames: frames/s flooding "
           f"{number(load['flood_frames'])} frames, p99 latency in us flooding, p50 and p99 "
           f"at {number(load['paced_rate'])} frames/s (paced)"]
    for streams, result in relay["results"].items():
        rows = [[way, *_fig(f["frames_per_s"], "{:,.0f}"),
                 f"{f['flood_latency_us']['p99']['median']:,.0f}",
                 f"{f['paced_latency_us']['p50']['median']:,.0f}",
                 f"{f['paced_latency_us']['p99']['median']:,.0f}"]
                for way, f in result["ways"].items()]
        ratio = result["sockmap_ratio"]
        # sockmap's ratios, a row per engine compared with: frames/s, paced p99
        against: dict[str, dict] = {}
        for key, other, column in [("throughput_vs_asyncio", "asyncio", "tput"),
                                   ("paced_p99_vs_asyncio", "asyncio", "p99"),
                                   ("throughput_vs_best_peer", result.get("best_peer"), "tput"),
                                   ("paced_p99_vs_haproxy", "haproxy", "p99"),
                                   ("throughput_vs_unframed", "sockmap_unframed", "tput")]:
            if key in ratio:
                against.setdefault(other, {})[column] = ratio[key]
        for other, cols in against.items():
            rows.append([f"sockmap/{other}",
                         *(_fig(cols["tput"], "{:.2f}x") if "tput" in cols else ["", "", ""]),
                         "", "", f"{cols['p99']['median']:.2f}x" if "p99" in cols else ""])
        ceiling = result.get("unframed_ratio", {}).get("throughput_vs_best_peer")
        if ceiling:
            rows.append([f"sockmap_unframed/{result['best_peer']}",
                         *_fig(ceiling, "{:.2f}x"), "", "", ""])
        out += [f"{streams} stream{'s' if streams != '1' else ''}:",
                table(["ENGINE", "FRAMES/S", "MIN", "MAX", "FLOOD P99", "PACED P50",
                       "PACED P99"], rows)]
    sweep = relay.get("write_sizes", {})
    if sweep:
        ways = list(dict.fromkeys(w for res in sweep.values() for w in res["ways"]))
        rows = [[batch, *(f"{res['ways'][w]['median']:,.0f}" if w in res["ways"] else ""
                          for w in ways),
                 *(f"{r[key]['throughput_vs_best_peer']['median']:.2f}x"
                   if "throughput_vs_best_peer" in r[key] else ""
                   for r in (res,) for key in ("sockmap_ratio", "unframed_ratio"))]
                for batch, res in sweep.items()]
        out += ["write sizes, 1 stream flooding: frames/s by frames a send (medians)",
                table(["FRAMES/SEND", *(w.upper() for w in ways), "SOCKMAP/BEST",
                       "UNFRAMED/BEST"], rows)]
    for name, note in relay.get("skipped", {}).items():
        out.append(f"skipped {name}: {note}")
    profile = relay.get("sockmap_profile", {})
    if profile:
        out.append("sockmap relay's programs, one more flood with BPF run-time statistics on:")
        rows = [[streams, name, number(p["runs"]), f"{p['ns_per_run']:,.0f}",
                 f"{p['frames_per_run']:,.1f}", f"{p['ns_per_frame']:,.1f}"]
                for streams, prof in profile.items() for name, p in prof["programs"].items()]
        out.append(table(["STREAMS", "PROGRAM", "RUNS", "NS/RUN", "FRAMES/RUN", "NS/FRAME"],
                         rows))
    if relay["errors"]:
        out.append("errors: " + "; ".join(relay["errors"]))
    return "\n".join(out)


def _core(r: dict) -> str:
    c = r["core"]
    rows = []
    for path, what in (("rx", "receive"), ("tx", "send")):
        for name in c["cores"]:
            f = c[name][path]
            rows.append([what, name, *(f"{f['batch_ns'][str(n)]['median'] / 1000:,.1f}"
                                       for n in c["sizes"]),
                         f"{f['fixed_ns']['median'] / 1000:,.1f}",
                         f"{f['per_frame_ns']['median']:,.0f}"])
        if "speedup" in c:
            rows.append([what, "pure / compiled",
                         *(f"{c['speedup'][path][str(n)]['median']:.2f}x" for n in c["sizes"]),
                         "", ""])
    return "\n".join([
        f"Per-batch cost of the Python paths on synthetic rings ({c['load']}): us per "
        "batch (medians), fixed us per batch and ns per frame (a line through the sizes)",
        table(["PATH", "CORE", *(f"{n}/BATCH" for n in c["sizes"]), "FIXED US", "NS/FRAME"],
              rows)])


# Each section's text, and the key of the report that says the section ran.
RENDERERS = [("parser_ns", _parser), ("zerolayer_dps", _xdp), ("xsk_fps", _delivery),
             ("tx_dps", _tx), ("xdp_forward_dps", _forward), ("relay", _relay),
             ("core", _core)]


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


def judged_table(counted: dict, expected: dict) -> str:
    """Each XDP counter of dut0 next to the reference judge's expectation."""
    rows = [[k, number(counted[k]), number(expected[k]),
             "" if counted[k] == expected[k] else "MISMATCH"] for k in counted]
    return ("XDP counters on dut0, against the reference judge's expectation:\n"
            + table(["COUNTER", "COUNTED", "EXPECTED", ""], rows))


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


COMMANDS = [bench, replay]
