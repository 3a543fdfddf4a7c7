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


class PortsParam(click.ParamType):
    """A TCP port or an inclusive range of them: 8000, 8000-8010."""

    name = "PORT[-PORT]"

    def convert(self, value, param, ctx):
        from pyxdp.streams.selection import parse_port_range

        try:
            return parse_port_range(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class CgroupParam(click.ParamType):
    """A cgroup v2 directory, as systemd names it (system.slice/x.service)."""

    name = "CGROUP"

    def convert(self, value, param, ctx):
        from pyxdp.errors import ZerolayerError
        from pyxdp.streams.selection import cgroup_dir

        try:
            return cgroup_dir(str(value))
        except ZerolayerError as exc:
            self.fail(str(exc), param, ctx)


@click.command()
@click.option("--pid", "pids", type=PidParam(), multiple=True,
              help="Watch process PID (repeatable).")
@click.option("--port", "ports", type=PortsParam(), multiple=True,
              help="Watch the processes with a TCP socket on PORT, local or remote "
                   "(repeatable; a range: 8000-8010): a server listening there, a client "
                   "connecting there.")
@click.option("--exe", "exes", multiple=True, metavar="GLOB",
              help="Watch the processes whose executable's path matches GLOB (repeatable; "
                   "'*/vllm').")
@click.option("--cgroup", "cgroups", type=CgroupParam(), multiple=True,
              help="Watch the processes in CGROUP and the cgroups below it (repeatable; "
                   "system.slice/litellm.service, a container's cgroup).")
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
def streams(pids, ports, exes, cgroups, as_json, count, duration, stall_ms, max_streams):
    """Time to first chunk, chunk gaps and status of every OpenAI- and
    Anthropic-compatible token stream on the host, plaintext and TLS.

    --pid, --port, --exe and --cgroup select what is watched (a union; a
    selected process's children follow it): their uprobes go into the
    selected processes alone, and the kernel's programs return at once for
    the others. Default: every process.

    Ctrl-C, SIGINT or SIGTERM end it, removing every probe it placed."""
    from pyxdp.cli.render import emit_json
    from pyxdp.kernel.privileges import require_bpf_admin
    from pyxdp.kernel.signals import stop_on_signals
    from pyxdp.streams import missed, table, watch
    from pyxdp.streams.selection import Selection

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
    selection = Selection(pids=tuple(pids), ports=tuple(ports), exes=tuple(exes),
                          cgroups=tuple(cgroups))
    with stop_on_signals() as stop, watch.Watch(stall_ms=stall_ms, max_streams=max_streams,
                                                on_note=note, selection=selection) as w:
        def draw() -> None:
            text = table.render(ended + w.open_streams(), w.tracker.counters, watch.NOT_SEEN)
            sys.stdout.write("\x1b[H\x1b[J" + text)
            sys.stdout.flush()

        cost = ("" if not selection.everything else
                "; every process's reads and writes run its tracepoint programs, and every "
                "process mapping a probed TLS library takes a uprobe trap per TLS call "
                "(`zerolayer bench --section streams` measures both): --port, --exe, "
                "--cgroup or --pid select")
        note(f"watching {selection.describe()}; TLS libraries probed: "
             f"{len(w.probes.libraries)}; Ctrl-C ends{cost}")
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
