"""The options several commands share, spelled and explained once."""

import click

INTERFACE_NETNS = "The interface is in named network namespace NS (see `ip netns list`)."
SOCKETS_NETNS = "Open the sockets in named network namespace NS (see `ip netns list`)."


def json_option(help_text: str = "Print JSON."):
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def netns_option(help_text: str = INTERFACE_NETNS):
    return click.option("--netns", metavar="NS", default=None, help=help_text)


flows_option = click.option(
    "--flows", type=click.Choice(["on", "off"]), default=None,
    help="Per-flow token cadence tracking (off by default: it costs a clock read and a "
         "hash update per token datagram).",
)

forward_option = click.option(
    "--forward", type=click.Choice(["on", "off"]), default=None,
    help="Route valid token datagrams for other hosts inside XDP (bpf_fib_lookup, then "
         "the egress devmap); off by default. Needs forwarding on in the kernel "
         "(net.ipv4.conf.IFACE.forwarding).",
)
