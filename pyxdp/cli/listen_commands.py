# SPDX-License-Identifier: Apache-2.0
"""`zerolayer listen`: token frames from AF_XDP sockets, as JSON lines or a live view."""

import json
import os
import sys

import click

from pyxdp.cli.options import json_option, netns_option, xsk_mode_options
from pyxdp.cli.render import write_lines
from pyxdp.xsk import busy_poll as busy_poll_mod
from pyxdp.xsk import sizing

# Plain numbers: --help needs no socket code (numpy, libbpf) loaded.
UMEM_2K = sizing.mib(sizing.DEFAULT_FRAMES * 2048)
UMEM_4K = sizing.mib(sizing.DEFAULT_FRAMES * 4096)
PER_QUEUE = sizing.mib(sizing.memory_bytes(sizing.DEFAULT_FRAMES, 2048, sizing.DEFAULT_RING_SIZE))


def _size(ctx, param, value: int) -> int:
    wrong = sizing.problem(value)
    if wrong:
        raise click.BadParameter(wrong)
    return value


HELP = f"""Print the token frames zerolayer redirects on IFACE to AF_XDP sockets.

By default each queue's socket holds a burst of 20,000 datagrams whole, in
{PER_QUEUE} of memory per queue (--frames, --ring-size). When listen stops it
says on stderr, per queue, how many frames it printed and how many datagrams
the socket lost, and why; with --json, as one JSON object.

Ctrl-C (or SIGTERM) stops it; the sockets are unregistered on the way out
and valid datagrams fall back to the kernel again. When zerolayer is
detached from IFACE, or IFACE goes away, it stops too: the summary, then one
line saying why, and exit 1."""


@click.command(help=HELP)
@click.argument("iface")
@click.option("--queue", "queues", type=click.IntRange(0), multiple=True, metavar="Q",
              help="Listen on rx queue Q only (repeat for several; default: every queue).")
@click.option("--count", type=click.IntRange(1), default=None, metavar="N",
              help="Stop after N frames.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=None, metavar="S",
              help="Stop after S seconds.")
@click.option("--frames", "umem_frames", type=int, default=sizing.DEFAULT_FRAMES,
              show_default=True, metavar="N", callback=_size,
              help="UMEM chunks per queue, a power of two: how many datagrams a queue holds "
                   "before the reader takes them. The default holds a 20,000-datagram burst "
                   f"in {UMEM_2K} per queue (2 KiB chunks; {UMEM_4K} where the MTU needs "
                   "4 KiB chunks), plus a fill ring of 16 bytes per chunk.")
@click.option("--ring-size", type=int, default=sizing.DEFAULT_RING_SIZE, show_default=True,
              metavar="N", callback=_size,
              help="RX ring entries per queue, a power of two, 16 bytes each.")
@click.option("--busy-poll", "busy_poll_usec", type=click.IntRange(1, 2**31 - 1), is_flag=False,
              flag_value=busy_poll_mod.DEFAULT_USEC, default=None, metavar="[USEC]",
              help="Busy-poll each queue's NAPI context for up to USEC microseconds "
                   f"(default {busy_poll_mod.DEFAULT_USEC}) before sleeping, preferred over "
                   "interrupts (SO_BUSY_POLL, SO_PREFER_BUSY_POLL and a budget of "
                   f"{busy_poll_mod.BusyPoll().budget} frames; Linux 5.11). What holds is "
                   "said; a driver that gives the socket no NAPI context (veth) is named.")
@xsk_mode_options
@netns_option()
@json_option()
def listen(iface, queues, count, timeout, umem_frames, ring_size, busy_poll_usec, bind, netns,
           as_json):
    from pyxdp.errors import ZerolayerError
    from pyxdp.kernel.privileges import preflight
    from pyxdp.xsk import listen as listen_mod

    preflight("zerolayer listen")
    busy = None if busy_poll_usec is None else busy_poll_mod.BusyPoll(usec=busy_poll_usec)
    with listen_mod.Listener(iface, queues or None, netns=netns, frames=umem_frames,
                             rx_size=ring_size, bind=bind or "auto",
                             busy_poll=busy) as listener:
        where = f"{iface} queue{'s' if len(listener.queues) > 1 else ''} " \
                f"{listen_mod.queue_list(listener.queues)}"
        size = listener.sizing()
        # With --json, stdout holds only frames: the rest goes to stderr, as tcpdump does.
        for note in listener.notes():
            click.echo(f"note: {note}", err=as_json)
        view = listen_mod.LiveView()
        tty = sys.stdout.isatty()
        stopped = None
        try:  # from the moment it says it listens, a signal is a normal end
            polling = listener.sockets[0].busy_poll
            busy_text = "" if polling is None else f"{polling.text()}; "
            click.echo(f"listening on {where} ({listener.mode} mode; {busy_text}per queue "
                       f"{sizing.mib(size['bytes_per_queue'])}: {size['frames']} chunks of "
                       f"{size['chunk_size']} bytes, an RX ring of {size['ring_size']}); "
                       "Ctrl-C to stop", err=as_json)
            for received in listener.receive(count=count, timeout=timeout):
                if as_json:
                    write_lines(received.json_lines(), tty)
                else:
                    write_lines([view.line(d) + "\n" for d in received.datagrams()], tty)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: a normal end
            pass
        except BrokenPipeError:  # the reader went away (`| head`): a normal end too
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except ZerolayerError as exc:  # detached, or IFACE gone: still say what was heard
            stopped = exc
        report = listener.finish()
        if as_json:
            click.echo(json.dumps({"summary": report.to_json()}), err=True)
        else:
            click.echo(report.text(where), err=True)
    if stopped is not None:
        raise stopped


COMMANDS = [listen]
