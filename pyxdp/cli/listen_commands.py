"""`zerolayer listen`: token frames from AF_XDP sockets, as JSON lines or a live view."""

import os
import sys

import click

from pyxdp.cli.options import json_option, netns_option
from pyxdp.cli.render import emit_json


@click.command()
@click.argument("iface")
@click.option("--queue", "queues", type=click.IntRange(0), multiple=True, metavar="Q",
              help="Listen on rx queue Q only (repeat for several; default: every queue).")
@click.option("--count", type=click.IntRange(1), default=None, metavar="N",
              help="Stop after N frames.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=None, metavar="S",
              help="Stop after S seconds.")
@netns_option()
@json_option()
def listen(iface, queues, count, timeout, netns, as_json):
    """Print the token frames zerolayer redirects on IFACE to AF_XDP sockets.

    Ctrl-C (or SIGTERM) stops it; the sockets are unregistered on the way out
    and valid datagrams fall back to the kernel again."""
    from pyxdp.kernel.privileges import preflight
    from pyxdp.xsk import listen as listen_mod

    preflight("zerolayer listen")
    frames = datagrams = 0
    with listen_mod.Listener(iface, queues or None, netns=netns) as listener:
        where = f"{iface} queue{'s' if len(listener.queues) > 1 else ''} " \
                f"{listen_mod.queue_list(listener.queues)}"
        # With --json, stdout holds only frames: the rest goes to stderr, as tcpdump does.
        for note in listener.notes():
            click.echo(f"note: {note}", err=as_json)
        click.echo(f"listening on {where} ({listener.mode} mode); Ctrl-C to stop", err=as_json)
        view = listen_mod.LiveView()
        try:
            for datagram in listener.datagrams(count=count, timeout=timeout):
                datagrams += 1
                frames += len(datagram.frames)
                if as_json:
                    for frame in datagram.frames:
                        emit_json(listen_mod.record(datagram, frame))
                else:
                    click.echo(view.line(datagram))
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: a normal end
            pass
        except BrokenPipeError:  # the reader went away (`| head`): a normal end too
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        lost = sum(s.lost for s in listener.statistics().values())
        summary = f"{frames} frames in {datagrams} datagrams on {where}, {listener.mode} mode"
        summary += f"; {lost} lost by the AF_XDP socket" + ("s" if len(listener.queues) > 1 else "")
        if listener.undecodable:
            summary += f"; {listener.undecodable} datagrams did not decode (a bug: please report)"
        click.echo(summary, err=True)


COMMANDS = [listen]
