# SPDX-License-Identifier: Apache-2.0
"""`zerolayer emit`: token datagrams out of an interface over AF_XDP transmit."""

import re

import click

from pyxdp.cli.options import ENDPOINT, json_option, netns_option, xsk_mode_options
from pyxdp.cli.render import emit_json

MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


def _mac(ctx, param, value: str | None) -> str | None:
    if value is not None and not MAC.match(value):
        raise click.BadParameter(f"{value!r} is not a MAC address (aa:bb:cc:dd:ee:ff)")
    return value


@click.command()
@click.argument("iface")
@click.option("--to", "to", required=True, type=ENDPOINT, metavar="ADDR:PORT",
              help="Destination, numeric (IPv6 as [ADDR]:PORT). It must be routed out of IFACE.")
@click.option("--count", type=click.IntRange(1), default=None, metavar="N",
              help="Send N datagrams (default: until Ctrl-C).")
@click.option("--rate", type=click.FloatRange(0, min_open=True), default=None, metavar="R",
              help="Datagrams per second, in bursts of what is due each millisecond "
                   "(default: flat out).")
@click.option("--frames-per-datagram", type=click.IntRange(1, 32), default=1, show_default=True,
              metavar="K", help="TOKEN frames in each datagram.")
@click.option("--payload-size", type=click.IntRange(0, 9000), default=16, show_default=True,
              metavar="B", help="Bytes of each frame's payload (its token number, then filler).")
@click.option("--queue", type=click.IntRange(0), default=0, show_default=True, metavar="Q",
              help="The interface's queue to send on.")
@click.option("--sport", type=click.IntRange(1, 65535), default=None, metavar="PORT",
              help="UDP source port (default: a free one, held while emit runs).")
@click.option("--dst-mac", default=None, metavar="MAC", callback=_mac,
              help="The next hop's MAC (default: the kernel's neighbour entry).")
@xsk_mode_options
@netns_option()
@json_option("Print the report as one JSON object.")
def emit(iface, to, count, rate, frames_per_datagram, payload_size, queue, sport, dst_mac,
         bind, netns, as_json):
    """Send token datagrams out of IFACE over AF_XDP, without the socket layer.

    Each datagram holds K TOKEN frames whose payloads carry the token's
    number, so a capture shows what arrived. The report says how many were
    submitted to the kernel and completed by it, and why any were not.
    Ctrl-C (or SIGTERM) stops, reaps what is in flight and reports."""
    from pyxdp.kernel.privileges import require_net_raw
    from pyxdp.kernel.signals import stop_on_signals
    from pyxdp.xsk import emit as emit_mod
    from pyxdp.xsk.sender import TokenSender

    require_net_raw("zerolayer emit")
    with stop_on_signals() as stop, \
            TokenSender(iface, to, netns=netns, queue=queue, sport=sport,
                        dst_mac=dst_mac, bind=bind or "auto") as sender:
        emit_mod.check_shape(frames_per_datagram, payload_size, sender.max_payload)
        d = sender.describe()
        pace = f"{rate:,g} datagrams/s" if rate else "flat out"
        click.echo(f"emitting on {iface} queue {queue} ({d['mode']} mode) to {d['to']} from "
                   f"{d['from']} via {d['route']['dst_mac']} (path MTU {d['path_mtu']}), "
                   f"{pace}{'' if count else '; Ctrl-C to stop'}", err=as_json)
        if d["note"]:
            click.echo(f"note: {d['mode']} mode: {d['note']}", err=as_json)
        result = emit_mod.run(sender, count=count, rate=rate,
                              frames_per_datagram=frames_per_datagram,
                              payload_size=payload_size, stop=stop)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(result.text())


COMMANDS = [emit]
