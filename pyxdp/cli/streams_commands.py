# SPDX-License-Identifier: Apache-2.0
"""`zerolayer streams`: the token streams over HTTP on this host, seen from
the kernel (docs/spec.md §11)."""

import os
import sys

import click


class PidParam(click.ParamType):
    """A running process's id: a wrong one is a usage error (exit 2)."""

    name = "PID"

    def convert(self, value, param, ctx):
        try:
            pid = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a process id", param, ctx)
        if pid <= 0 or not os.path.isdir(f"/proc/{pid}"):
            self.fail(f"no process {pid}", param, ctx)
        return pid


@click.command()
@click.option("--pid", "pids", type=PidParam(), multiple=True,
              help="Watch only process PID (repeatable): its uprobes go into it alone, and "
                   "the kernel filters its syscalls. Default: every process.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per stream on stdout when it ends, and one per stream "
                   "still open at exit (\"status\": \"open\"), instead of the table.")
@click.option("--count", type=click.IntRange(1), default=None, metavar="N",
              help="Stop after N streams have ended.")
@click.option("--duration", type=click.FloatRange(0, min_open=True), default=None,
              metavar="SECONDS", help="Stop after SECONDS.")
@click.option("--stall-ms", type=click.IntRange(1), default=1000, show_default=True,
              metavar="MS", help="A gap between chunks longer than MS is a stall.")
@click.option("--max-streams", type=click.IntRange(1), default=10000, show_default=True,
              metavar="N", help="Streams tracked at most; the least recently active one is "
                                "evicted, and counted, beyond.")
def streams(pids, as_json, count, duration, stall_ms, max_streams):
    """Time to first chunk, chunk gaps and status of every OpenAI- and
    Anthropic-compatible token stream on the host, plaintext and TLS.

    Ctrl-C, SIGINT or SIGTERM end it, removing every probe it placed."""
    from pyxdp.cli.render import emit_json
    from pyxdp.kernel.privileges import require_bpf_admin
    from pyxdp.kernel.signals import stop_on_signals
    from pyxdp.streams import missed, table, watch

    require_bpf_admin("zerolayer streams")
    note = lambda line: click.echo(f"zerolayer streams: {line}", err=True)  # noqa: E731
    if as_json:
        note(watch.NOT_SEEN)
    ended: list[dict] = []

    def emit(stream: dict) -> None:
        if as_json:
            emit_json(stream)
        else:
            ended.append(stream)
            del ended[:-200]

    tty = sys.stdout.isatty()
    with stop_on_signals() as stop, watch.Watch(pids, stall_ms, max_streams,
                                                      on_note=note) as w:
        def draw() -> None:
            text = table.render(ended + w.open_streams(), w.tracker.counters, watch.NOT_SEEN)
            sys.stdout.write("\x1b[H\x1b[J" + text)
            sys.stdout.flush()

        who = "process " + ", ".join(map(str, sorted(set(pids)))) if pids else "every process"
        note(f"watching {who}; TLS libraries probed: {len(w.probes.libraries)}; "
             "Ctrl-C ends")
        w.run(stop, emit, duration=duration, count=count,
              tick=draw if (tty and not as_json) else None)
        still_open = w.open_streams()
        if as_json:
            for stream in still_open:
                emit_json(stream)
            sys.stdout.flush()
        else:
            sys.stdout.write(table.render(ended + still_open, w.tracker.counters,
                                          watch.NOT_SEEN))
            sys.stdout.flush()
        for line in missed.lines(w.tracker.counters, w.session.ends_missed, w.session.behind,
                                 w.session.failures, w.session.refused(),
                                 w.probes.skipped_runs()):
            note(line)


COMMANDS = [streams]
