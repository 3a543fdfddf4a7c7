# SPDX-License-Identifier: Apache-2.0
"""Commands for the XDP data path: attach, detach, status, stats, config."""

import click

from pyxdp.cli.options import flows_option, forward_option, json_option, netns_option, wait_option
from pyxdp.cli.render import counters_table, emit_json
from pyxdp.human import number, table
from pyxdp.xdp.dispatcher import MAX_PRIORITY


def _on(value: str | None) -> bool | None:
    return None if value is None else value == "on"


@click.command()
@click.argument("iface")
@click.option("--mode", type=click.Choice(["auto", "native", "skb"]), default="auto",
              show_default=True, help="auto tries native, then skb.")
@click.option("--port", "ports", type=click.IntRange(1, 65535), multiple=True,
              help="UDP destination port carrying token frames (repeat; default 9977).")
@click.option("--on-malformed", type=click.Choice(["drop", "pass"]), default=None,
              help="What to do with malformed datagrams (default drop).")
@flows_option
@forward_option
@click.option("--replace", is_flag=True,
              help="Replace an XDP program another tool attached outside libxdp's dispatcher.")
@click.option("--priority", type=click.IntRange(0, MAX_PRIORITY), default=None,
              help="Place in libxdp's dispatcher, lower runs first (default 20, or the current "
                   "one on an upgrade).")
@wait_option()
@netns_option()
@json_option()
def attach(iface, mode, ports, on_malformed, flows, forward, replace, priority, wait_s, netns,
           as_json):
    """Attach zerolayer's XDP program to IFACE, or upgrade it in place."""
    from pyxdp.cli.netns_hints import pointing_to_netns
    from pyxdp.xdp import loader, parsers

    with pointing_to_netns(iface, netns):
        result = loader.attach(iface, mode=mode, ports=list(ports) or None,
                               on_malformed=on_malformed, flows=_on(flows),
                               forward=_on(forward), replace=replace, netns=netns,
                               wait_s=wait_s, priority=priority)
    if as_json:
        emit_json(result.to_json())
        return
    click.echo(
        f"{result.action} {iface}: {result.mode} mode, program id {result.program_id}, "
        f"ports {','.join(map(str, result.ports))}, malformed datagrams: {result.on_malformed}, "
        f"flow tracking {'on' if result.flow_tracking else 'off'}, "
        f"{_forwarding(result.forwarding, result.egress)}"
    )
    if result.dispatcher is not None:
        click.echo(f"in libxdp's dispatcher at priority {result.priority}, with: "
                   f"{_others(result.dispatcher)}")
    parser_note = parsers.note(result.parser) if result.parser else None
    for line in [n for n in (result.note, parser_note) if n] + result.forward_notes:
        click.echo(f"note: {line}")


def _others(members: list[dict]) -> str:
    """The other programs of a dispatcher, for one line."""
    others = [f"{m['name']} (id {m['program_id']}, priority {m['priority']})"
              for m in members if m["owner"] != "zerolayer"]
    return ", ".join(others) or "no other program"


def _forwarding(on: bool, egress: list[str]) -> str:
    return f"forwarding on (egress: {', '.join(egress) or 'none'})" if on else "forwarding off"


@click.command()
@click.argument("iface", required=False)
@click.option("--stale", is_flag=True,
              help="Instead of IFACE: remove every stale pin dir (of interfaces that are gone or "
                   "run no zerolayer program, and all of a namespace that is gone).")
@wait_option()
@netns_option()
@json_option()
def detach(iface, stale, wait_s, netns, as_json):
    """Remove zerolayer's program from IFACE and unpin its maps."""
    from pyxdp.xdp import loader

    if stale:
        if iface or netns:
            raise click.UsageError("--stale looks at every interface and namespace: "
                                   "give no IFACE or --netns")
        _detach_stale(loader.remove_stale(wait_s), as_json)
        return
    if not iface:
        raise click.UsageError("give IFACE, or --stale")
    result = loader.detach(iface, netns=netns, wait_s=wait_s)
    if as_json:
        emit_json(result.to_json())
        return
    if result.action == "detached":
        click.echo(f"detached {iface} (program id {result.program_id}); pins removed")
    else:
        click.echo(f"removed stale pins of {iface}: {result.note}")


def _detach_stale(results, as_json: bool) -> None:
    if as_json:
        emit_json({"removed": [r.to_json() for r in results]})
        return
    for r in results:
        where = f" (netns {r.netns})" if r.netns else ""
        click.echo(f"removed stale pins of {r.interface}{where}: {r.note}")
    if not results:
        click.echo("no stale pins")


@click.command()
@click.argument("iface", required=False)
@netns_option()
@json_option()
def status(iface, netns, as_json):
    """Show the XDP program of every interface (or IFACE), and who owns it."""
    from pyxdp.cli import netns_hints
    from pyxdp.kernel import bpffs
    from pyxdp.kernel import netns as netns_mod
    from pyxdp.xdp import ownership

    with netns_hints.pointing_to_netns(iface, netns):
        rows = ownership.status(iface, netns)
    # Without --netns only the host is shown: name the namespaces zerolayer is in too.
    elsewhere = netns_hints.pinned_in_namespaces(iface) if netns is None else {}
    gone = {ns for ns in elsewhere if not netns_mod.exists(ns)}
    bits = bpffs.mode()
    if as_json:
        emit_json({"interfaces": rows, **({"other_netns": [
            {"netns": ns, "interfaces": names, "stale": ns in gone}
            for ns, names in elsewhere.items()]} if netns is None else {}),
            "bpffs_mode": f"{bits:04o}"})
        return
    out = []
    for r in rows:
        ports = ",".join(map(str, r["ports"])) if r.get("ports") else None
        owner = r["owner"] or ("stale pins" if r["stale_pins"] else None)
        onoff = {True: "on", False: "off"}
        out.append([r["interface"], r["mode"], r["program_name"], r["program_id"],
                    owner, r.get("parser"), ports, r.get("on_malformed"),
                    onoff.get(r.get("flow_tracking")), onoff.get(r.get("forwarding"))])
    click.echo(table(["INTERFACE", "MODE", "PROGRAM", "ID", "OWNER", "PARSER", "PORTS",
                      "MALFORMED", "FLOWS", "FORWARD"], out))
    for r in rows:
        if r.get("dispatcher"):
            click.echo(f"{r['interface']}: libxdp's dispatcher runs, in this order: " + ", ".join(
                f"{m['name']} (id {m['program_id']}, priority {m['priority']}"
                f"{', zerolayer' if m['owner'] == 'zerolayer' else ''})" for m in r["dispatcher"]))
    stale = [r["interface"] for r in rows if r["stale_pins"]]
    if stale:
        click.echo(f"note: stale pins of {', '.join(stale)}: `zerolayer detach --stale` "
                   "removes them")
    for ns, names in elsewhere.items():
        if ns in gone:
            click.echo(f"note: netns {ns} is gone: zerolayer's pins there ({', '.join(names)}) "
                       "are stale and still hold their programs: `zerolayer detach --stale` "
                       "removes them")
        else:
            click.echo(f"note: zerolayer has pins in netns {ns} too ({', '.join(names)}): "
                       f"`zerolayer status --netns {ns}`")
    note = bpffs.open_mode_note(bits)
    if note:
        click.echo(f"note: {note}")


@click.command()
@click.argument("iface")
@click.option("--watch", type=float, metavar="SECONDS", default=None,
              help="Print per-second rates every SECONDS until interrupted.")
@click.option("--flows", "show_flows", is_flag=True,
              help="Show per-flow token rates and gap percentiles (most tokens first).")
@click.option("--top", type=click.IntRange(min=1), metavar="N", default=None,
              help="With --flows: only the N flows with the most tokens.")
@click.option("--window", type=click.FloatRange(0.1, 60), metavar="SECONDS", default=None,
              help="With --flows: TOKENS/S is the rate over this many seconds, read twice "
                   "(default 1).")
@netns_option()
@json_option()
def stats(iface, watch, show_flows, top, window, netns, as_json):
    """Show the counters of zerolayer on IFACE, read from its pinned maps."""
    for flag, given in (("--top", top is not None), ("--window", window is not None)):
        if given and not show_flows:
            raise click.UsageError(f"{flag} goes with --flows")
    if show_flows and watch is not None:
        raise click.UsageError("--flows is a snapshot: for live per-flow rates run `zerolayer top`")
    from pyxdp.cli.netns_hints import pointing_to_netns

    with pointing_to_netns(iface, netns):
        _stats(iface, watch, show_flows, top, window, netns, as_json)


def _stats(iface, watch, show_flows, top, window, netns, as_json) -> None:
    from pyxdp.proto import counters
    from pyxdp.xdp import stats as stats_mod

    if show_flows:
        _print_flows(iface, netns, top, 1.0 if window is None else window, as_json)
        return
    if watch is None:
        snap = stats_mod.read(iface, netns)
        if as_json:
            emit_json(snap)
            return
        state = (f"{snap['mode']} mode, program id {snap['program_id']}, "
                 f"{snap['parser']} parser") if snap["attached"] else "not attached (stale pins)"
        click.echo(f"{iface}: {state}")
        click.echo(counters_table(snap["counters"]))
        return
    try:
        for snap in stats_mod.watch(iface, netns, watch):
            if as_json:
                emit_json(snap)
            else:
                # the counters the table gives a view, as top shows them
                rates = counters.viewed(counters.flatten(snap["rates"]), snap["parser"])
                click.echo("  ".join([iface] + [f"{number(v)} {c.view}/s" for c, v in
                                                zip(counters.VIEWED, rates) if v is not None]))
    except KeyboardInterrupt:
        pass


def _print_flows(iface, netns, top, window, as_json) -> None:
    from pyxdp.xdp import flows

    snap = flows.report(iface, netns, top, window)
    if as_json:
        emit_json(snap)
        return
    state = f"{snap['mode']} mode, program id {snap['program_id']}" if snap["attached"] \
        else "not attached (stale pins)"
    tracking = "on" if snap["flow_tracking"] else "OFF (no new samples)"
    click.echo(f"{iface}: {state}; flow tracking {tracking}; "
               f"{number(snap['flows_total'])} of {number(snap['flows_capacity'])} flows in the table"
               + (f", showing {len(snap['flows'])}" if top else "")
               + f"; TOKENS/S over the last {snap['window_s']:.1f}s, AVG/S first to last datagram")
    rows = []
    for f in snap["flows"]:
        pct = flows.percentile_labels(f["gap_histogram"])
        average = f["avg_tokens_per_s"]
        rows.append([f["src"], f["dport"], number(f["frames"]["token"]),
                     number(f["tokens_per_s"]), "-" if average is None else number(average),
                     pct["p50"], pct["p90"], pct["p99"],
                     number(f["datagrams"]), f"{f['idle_s']:.1f}s"])
    click.echo(table(["SRC", "DPORT", "TOKENS", "TOKENS/S", "AVG/S", "GAP P50", "P90", "P99",
                      "DATAGRAMS", "IDLE"], rows))


@click.command()
@click.argument("iface")
@click.option("--port", "ports", type=click.IntRange(1, 65535), multiple=True,
              help="Make the token port set exactly these (repeat).")
@click.option("--on-malformed", type=click.Choice(["drop", "pass"]), default=None)
@flows_option
@forward_option
@wait_option()
@netns_option()
@json_option()
def config(iface, ports, on_malformed, flows, forward, wait_s, netns, as_json):
    """Show or change the running configuration of IFACE, without reloading."""
    from pyxdp.xdp import live_config

    cfg = live_config.update(iface, netns, ports=list(ports) or None,
                             on_malformed=on_malformed, flows=_on(flows), forward=_on(forward),
                             wait_s=wait_s)
    if as_json:
        emit_json(cfg)
        return
    click.echo(f"{iface}: ports {','.join(map(str, cfg['ports']))}, "
               f"malformed datagrams: {cfg['on_malformed']}, "
               f"flow tracking {'on' if cfg['flow_tracking'] else 'off'}, "
               f"{_forwarding(cfg['forwarding'], cfg['egress'])}")
    for line in cfg["forward_notes"]:
        click.echo(f"note: {line}")


COMMANDS = [attach, detach, status, stats, config]
