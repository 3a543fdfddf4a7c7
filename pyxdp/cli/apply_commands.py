# SPDX-License-Identifier: Apache-2.0
"""`zerolayer apply`: make the host match a configuration file, once or
for as long as it runs (--watch). docs/spec.md §10."""

import os
import sys
import time

import click

from pyxdp.cli.options import json_option
from pyxdp.cli.render import emit_json
from pyxdp.errors import ZerolayerError
from pyxdp.human import table
from pyxdp.xdp.iface_lock import DEFAULT_WAIT_S

BAD_FILE = 2  # the exit status of a configuration that cannot be read or is wrong


def load_config(ctx: click.Context, path: str):
    """The configuration in PATH; a bad one ends the command with one line
    and exit 2."""
    from pyxdp.service import config

    try:
        return config.load(path)
    except config.ConfigError as exc:
        click.echo(f"zerolayer: {exc}", err=True)
        ctx.exit(BAD_FILE)


def _log(line: str) -> None:
    """One line on stdout, timestamped unless journald stamps it (JOURNAL_STREAM)."""
    if not os.environ.get("JOURNAL_STREAM"):
        line = time.strftime("%Y-%m-%dT%H:%M:%SZ ", time.gmtime()) + line
    click.echo(line)
    sys.stdout.flush()


def _render(report, config) -> str:
    lines = [f"{'dry-run' if report.dry_run else 'apply'} {report.path}"]
    if report.outcomes:
        lines.append(table(
            ["ACTION", "INTERFACE", "NETNS", "STATUS", "REASON"],
            [[o.action.action, o.action.interface or "-", o.action.netns or "-", o.status,
              o.error or o.action.reason] for o in report.outcomes]))
    counts: dict[str, int] = {}
    for o in report.outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    lines.append(", ".join(f"{n} {status}" for status, n in counts.items()) if counts
                 else "nothing to do" + ("" if config.interfaces else
                                         ": the file names no interface"))
    lines.extend(config.unmatched([o.action.want for o in report.outcomes]))
    return "\n".join(lines)


@click.command()
@click.argument("file", required=False, metavar="[FILE]")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--prune", is_flag=True,
              help="Also detach zerolayer from interfaces the file does not name, in each "
                   "namespace it names an interface in.")
@click.option("--watch", is_flag=True,
              help="Stay running: converge again when links appear, vanish or are renamed, "
                   "when the file changes, and on SIGHUP; SIGTERM stops.")
@click.option("--wait", "wait_s", type=click.FloatRange(0), default=DEFAULT_WAIT_S,
              show_default=True, metavar="SECONDS",
              help="How long to wait while another apply runs or another zerolayer command "
                   "changes an interface (0: fail at once).")
@json_option("Print each action and whether anything changed as one JSON object.")
@click.pass_context
def apply(ctx, file, dry_run, prune, watch, wait_s, as_json):
    """Make the host match a configuration file (default /etc/zerolayer/zerolayer.toml).

    Exit 0 when the host matches the file afterwards, 1 when it could not
    be made to, 2 for a file that cannot be read or is wrong.

    \b
    zerolayer apply --dry-run
    zerolayer apply
    zerolayer apply --prune --json
    zerolayer apply --watch
    """
    if watch and (dry_run or as_json):
        raise click.UsageError(f"{'--dry-run' if dry_run else '--json'} goes without --watch "
                               "(which logs one line per action)")
    from pyxdp.service import apply as apply_mod
    from pyxdp.service import watch as watch_mod
    from pyxdp.service.config import DEFAULT_PATH

    config = load_config(ctx, file or DEFAULT_PATH)
    if watch:
        watch_mod.watch(config, prune=prune, wait_s=wait_s, log=_log)
        return
    report = apply_mod.converge(config, prune=prune, dry_run=dry_run, wait_s=wait_s)
    if as_json:
        emit_json(report.to_json())
    else:
        click.echo(_render(report, config))
    unmet = [o for o in report.outcomes if o.status in (apply_mod.FAILED, apply_mod.REFUSED)]
    if unmet or not (report.matched or dry_run):
        first = f": {apply_mod.describe(unmet[0])}" if unmet else ": it changed meanwhile"
        more = f" (and {len(unmet) - 1} more)" if len(unmet) > 1 else ""
        verb = "the plan cannot make" if dry_run else "could not make"
        raise ZerolayerError(f"{verb} the host match {config.path}{first}{more}")


COMMANDS = [apply]
