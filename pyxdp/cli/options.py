# SPDX-License-Identifier: Apache-2.0
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


def xsk_mode_options(func):
    """--zero-copy / --copy, into one BIND parameter: auto (neither) binds
    zero-copy where the driver offers it, else copy, and says why."""
    func = click.option(
        "--copy", "bind", flag_value="copy",
        help="Bind the AF_XDP sockets in copy mode, even where the driver offers zero-copy.",
    )(func)
    return click.option(
        "--zero-copy", "bind", flag_value="zerocopy",
        help="Bind the AF_XDP sockets in zero-copy mode, or refuse, saying why the driver "
             "cannot (default: zero-copy where the driver offers it, else copy).",
    )(func)


def wait_option():
    from pyxdp.xdp.iface_lock import DEFAULT_WAIT_S

    return click.option(
        "--wait", "wait_s", type=click.FloatRange(0), default=DEFAULT_WAIT_S, show_default=True,
        metavar="SECONDS",
        help="How long to wait while another zerolayer command changes IFACE (0: fail at "
             "once). A command that gives up has changed nothing.")


class EndpointParam(click.ParamType):
    """ADDR:PORT, checked while parsing, so a bad one is a usage error
    (exit 2) like any other; the command gets the text."""

    name = "ADDR:PORT"

    def __init__(self, any_port: bool = False):
        self.any_port = any_port  # port 0 too: a socket to bind, the kernel picks

    def convert(self, value, param, ctx):
        from pyxdp.errors import ZerolayerError
        from pyxdp.kernel.routes import parse_endpoint

        try:
            parse_endpoint(value, any_port=self.any_port)
        except ZerolayerError as exc:
            self.fail(str(exc), param, ctx)
        return value


ENDPOINT = EndpointParam()
BIND_ENDPOINT = EndpointParam(any_port=True)
