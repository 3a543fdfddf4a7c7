# SPDX-License-Identifier: Apache-2.0
"""`zerolayer tune`: apply a host tuning profile, revert it, verify it."""

import click

from pyxdp.cli.options import json_option
from pyxdp.cli.render import emit_json
from pyxdp.errors import ZerolayerError
from pyxdp.human import table


def _emit(payload, text: str, as_json: bool) -> None:
    if as_json:
        emit_json(payload)
    else:
        click.echo(text)


def _render(report) -> str:
    """The report for people: what was done where, the preflight, a table, the counts."""
    lines = [" ".join(filter(None, (report.action, report.profile, "on", report.where)))]
    if report.preflight:
        lines.append(_preflight_line(report.preflight))
    if report.rows:
        lines.append(table(
            ["STEP", "KNOB", "BEFORE → AFTER", "STATUS", "REASON"],
            [[row.step, row.knob, _values(row), row.status, row.reason]
             for row in report.rows]))
    counts = report.counts()
    lines.append(", ".join(f"{n} {status}" for status, n in counts.items())
                 if counts else "nothing to do")
    lines.extend(f"note: {note}" for note in report.notes)
    return "\n".join(lines)


# The statuses of a row whose value moves (or would); any other row shows
# the one value it holds, so a refused `0` is not drawn as a change `0 → 0`.
_MOVES = ("applied", "planned", "restored")


def _values(row) -> str:
    if row.before is None and row.after is None:
        return ""
    if row.status in _MOVES:
        return f"{_show(row.before)} → {_show(row.after)}"
    return _show(row.after if row.after is not None else row.before)


def _show(value: str | None) -> str:
    # /proc writes multi-field values with tabs, which would break the table.
    return "-" if value is None else " ".join(value.split())


def _preflight_line(facts: dict) -> str:
    parts = [f"kernel {facts['kernel']}"]
    if facts.get("initial_netns") is not None:
        parts.append("initial netns" if facts["initial_netns"] else "not the initial netns")
    parts.append("/proc/sys writable" if facts["proc_sys_writable"] else "/proc/sys READ-ONLY")
    if facts.get("congestion_controls") is not None:
        parts.append(f"congestion controls: {' '.join(facts['congestion_controls'])}")
    checked = facts.get("qdiscs_checked") or {}
    if checked:
        parts.append("qdiscs: " + " ".join(
            f"{kind}{'' if ok else ' (absent)' if ok is False else ' (unknown)'}"
            for kind, ok in checked.items()
        ))
    parts.append(f"cpufreq: {'yes' if facts['cpufreq'] else 'no'}")
    if facts.get("irqbalance_pid"):
        parts.append(f"irqbalance running (pid {facts['irqbalance_pid']})")
    return "preflight: " + " · ".join(parts)


@click.command()
@click.option("--profile", "profile_name", metavar="NAME|PATH",
              help="Apply this profile: a shipped name (see --list) or a .toml file.")
@click.option("--revert", is_flag=True,
              help="Put back what zerolayer changed, newest first.")
@click.option("--verify", is_flag=True,
              help="Check that what zerolayer set still holds; exit 1 on drift.")
@click.option("--list", "list_profiles", is_flag=True, help="List the shipped profiles.")
@click.option("--netns", metavar="NS",
              help="Tune only the per-namespace knobs of network namespace NS.")
@click.option("--interface", "-i", "interfaces", multiple=True, metavar="IFACE",
              help="An interface for the per-device knobs (root qdisc, NAPI, IRQs). "
                   "Repeat for several.")
@click.option("--dry-run", is_flag=True,
              help="Print the plan (of --profile or --revert); change nothing.")
@click.option("--strict", is_flag=True,
              help="Stop at the first knob this host lacks, instead of skipping it.")
@json_option()
@click.option("--root", metavar="DIR", type=click.Path(file_okay=False),
              help="Use DIR/proc and DIR/sys instead of the kernel's (a copy, for tests).")
@click.option("--state-dir", metavar="DIR", type=click.Path(file_okay=False),
              help="Where the state file lives (default /run/zerolayer/tune).")
@click.pass_context
def tune(ctx, profile_name, revert, verify, list_profiles, netns, interfaces, dry_run,
         strict, as_json, root, state_dir):
    """Tune the host for token traffic, and put it back exactly.

    \b
    zerolayer tune --profile inf2 -i eth0 --dry-run
    zerolayer tune --profile inf2 -i eth0
    zerolayer tune --verify
    zerolayer tune --revert --dry-run
    zerolayer tune --revert
    """
    chosen = [flag for flag, given in (("--profile", profile_name is not None),
                                       ("--revert", revert), ("--verify", verify),
                                       ("--list", list_profiles)) if given]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --profile, --revert, --verify, --list")
    if profile_name is None:
        for flag, given in (("--dry-run", dry_run and not revert), ("--strict", strict),
                            ("--interface", interfaces)):
            if given:
                raise click.UsageError(
                    f"{flag} goes with --profile{' or --revert' if flag == '--dry-run' else ''}")

    from pyxdp.kernel import link_names
    from pyxdp.trusted_file import BadFile
    from pyxdp.tuning import engine, profile

    for name in interfaces:  # joined into /sys/class/net/NAME paths
        problem = link_names.problem(name)
        if problem:
            raise click.BadParameter(problem, param_hint="--interface")

    if list_profiles:
        loaded = [profile.load(name) for name in profile.shipped()]
        _emit({"profiles": [{"name": p.name, "summary": p.summary,
                             "steps": [s.id for s in p.steps]} for p in loaded]},
              "\n".join(f"{p.name:<12} {p.summary}" for p in loaded), as_json)
        return

    places = {"netns": netns, "root": root, "state_dir": state_dir}
    if profile_name is not None:
        try:
            chosen_profile = profile.load(profile_name)
        except BadFile as exc:  # as apply's file: refused, unreadable or wrong
            click.echo(f"zerolayer: {exc}", err=True)
            ctx.exit(2)
        report = engine.apply(chosen_profile, interfaces=interfaces,
                              dry_run=dry_run, strict=strict, **places)
    elif revert:
        report = engine.revert(dry_run=dry_run, **places)
    else:
        report = engine.verify(**places)
    _emit(report.to_json(), _render(report), as_json)
    if report.error:
        raise ZerolayerError(report.error)


COMMANDS = [tune]
