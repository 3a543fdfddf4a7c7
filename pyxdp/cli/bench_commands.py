# SPDX-License-Identifier: Apache-2.0
"""`zerolayer bench`: measurements, each on a lab it builds itself (or, for
the relay and core sections, on loopback or none). The sections come from
pyxdp.bench.registry; each renders its own text."""

import os

import click

from pyxdp.bench.registry import DEFAULT_SECTIONS, SECTIONS
from pyxdp.bench.section import Section
from pyxdp.cli.options import json_option
from pyxdp.cli.render import emit_json
from pyxdp.errors import ZerolayerError
from pyxdp.kernel.privileges import preflight

DELIVERY, TX, RELAY = (SECTIONS[name] for name in ("delivery", "tx", "relay"))
ON_LAB = [name for name, s in SECTIONS.items() if s.on_lab]


def _pair(ctx, param, value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    names = value.split(",")
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise click.BadParameter(f"{value!r} is not DUT,PEER (two interface names)")
    return names[0], names[1]


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
                   f"{DELIVERY.full.frames:,}; {DELIVERY.quick.frames:,} with --quick).")
@click.option("--tx-datagrams", metavar="N", type=click.IntRange(min=1000), default=None,
              help="tx: datagrams each sender sends per round (default "
                   f"{TX.full.datagrams:,}; {TX.quick.datagrams:,} with --quick).")
@click.option("--relay-streams", metavar="N", type=click.IntRange(1, 1024), multiple=True,
              help="relay: concurrent streams of a run; repeat for more (default "
                   f"{', '.join(map(str, RELAY.full.streams))}).")
@click.option("--relay-frames", metavar="N", type=click.IntRange(min=1000), default=None,
              help="relay: frames of a flood, all streams together (default "
                   f"{RELAY.full.flood_frames:,}; {RELAY.quick.flood_frames:,} "
                   "with --quick).")
@click.option("--tune-host-wide", is_flag=True,
              help="tune: also apply the profiles' host-wide knobs (host-wide sysctls, CPU "
                   "governor and idle states, IRQ affinity), on the host, for each arm, "
                   "reverted after it (default: left alone and listed as not applied).")
@click.option("--tune-steps", is_flag=True,
              help="tune: also measure each step of each profile alone, so a profile's "
                   "effect is laid to its knobs (a step that changes nothing here is listed, "
                   "not run).")
@click.option("--pair", metavar="DUT,PEER", default=None, callback=_pair,
              help="Run the lab's sections (" + ", ".join(ON_LAB) + ") on these two "
                   "interfaces, which reach each other (two NICs on one wire), moved into the "
                   "lab's namespaces while it runs, in place of a veth pair.")
def bench(sections, as_json, plot_path, quick, rounds, delivery_frames, tx_datagrams,
          relay_streams, relay_frames, tune_host_wide, tune_steps, pair):
    """Measure zerolayer against its floors, side by side: on a veth lab it
    builds itself (sections parser, xdp, delivery, tx; or on --pair), on a
    routed lab of three namespaces (forward) and on loopback (relay)."""
    sections = sections or DEFAULT_SECTIONS
    if pair and any(not SECTIONS[name].on_lab for name in sections):
        raise click.UsageError(f"--pair goes with the lab's sections only ({', '.join(ON_LAB)}):"
                               " name them with --section")
    options = {"delivery_frames": delivery_frames, "tx_datagrams": tx_datagrams,
               "relay_streams": relay_streams, "relay_frames": relay_frames,
               # A flag is None when not given.
               "tune_host_wide": tune_host_wide or None, "tune_steps": tune_steps or None}
    for name, section in SECTIONS.items():
        for option in section.options:
            if options[option] not in (None, ()) and name not in sections:
                raise click.UsageError(f"--{option.replace('_', '-')} goes with --section {name}")
    if plot_path:
        from pyxdp.bench.plot import require_matplotlib

        _check_writable(plot_path)
        require_matplotlib()  # before minutes of measuring, not after
    from pyxdp.bench import runner as bench_mod

    preflight("zerolayer bench")
    plan = bench_mod.plan(quick, rounds=rounds, **options)
    say = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    report = bench_mod.run(sections, plan, progress=say, pair=pair)
    ran = [s for name, s in SECTIONS.items() if name in sections]
    if plot_path:
        from pyxdp.bench.plot import write

        write(report, sections, plot_path)
        report["plot"] = plot_path
    if as_json:
        emit_json(report)
    else:
        click.echo("")
        click.echo(_render(report, ran))
        if plot_path:
            click.echo(f"\nplot: {plot_path}")
    for section in ran:
        errors = section.errors(report)
        if errors:
            raise ZerolayerError(f"the {section.name} section went wrong ({len(errors)} error"
                                 f"{'s' if len(errors) > 1 else ''}): {'; '.join(errors)}")


def _render(r: dict, ran: list[Section]) -> str:
    m = r["machine"]
    where = (f"{m.get('cpu_model') or m['arch']}, {m['cpus']} CPUs, Linux {m['kernel']}"
             + (", virtualized" if m.get("virtualized") else ""))
    out = [f"zerolayer bench{' (quick: not for quoting)' if r['quick'] else ''} on {where}, "
           f"{r['duration_s']} s; medians of rounds, with min and max"]
    for i, section in enumerate(ran, 1):
        out += ["", f"{i}. " + section.render(r)]

    if r["targets"]:  # a section may set none (tune)
        out += ["", "Targets"]
    for t in r["targets"]:
        verdict = "met" if t["met"] else "not reached" if t["kind"] == "goal" else "MISSED"
        unit = t.get("unit", "x")
        out.append(f"  {t['kind']:<6} {t['what']}: {t['bound']}{unit}, "
                   f"measured {t['measured']:.2f}{unit}: {verdict}")
    return "\n".join(out)


COMMANDS = [bench]
