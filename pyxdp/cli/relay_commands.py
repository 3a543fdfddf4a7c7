# SPDX-License-Identifier: Apache-2.0
"""TCP token streams: `zerolayer relay` (the in-kernel frame relay), and the
test token server and client, `zerolayer serve` and `zerolayer send`."""

import time

import click

from pyxdp.cli.options import BIND_ENDPOINT, SOCKETS_NETNS, json_option, netns_option
from pyxdp.cli.render import counters_table, emit_json
from pyxdp.human import number, table
from pyxdp.kernel.signals import stop_on_signals


def _interval_line(stats: dict, before: dict | None, elapsed: float) -> str:
    """One line per --interval, as xdp-bench prints them."""
    from pyxdp.relay.schema import BROKEN

    frames_total = sum(stats["counters"]["frames"].values())
    rate = ""
    if before is not None and elapsed > 0:
        rate = f" ({number((frames_total - sum(before['counters']['frames'].values())) / elapsed)}/s)"
    broken = sum(stats["closed"][r] for r in BROKEN)
    p = stats["pairs"]
    return (f"{p['active']} pairs active, {p['closed']} closed ({broken} broken streams)  "
            f"{number(frames_total)} frames{rate}  "
            f"{number(stats['counters']['payload_bytes'])} payload bytes")


@click.command()
@click.option("--listen", "listen_addr", required=True, type=BIND_ENDPOINT, metavar="ADDR:PORT",
              help="Where clients connect (IPv6 as [ADDR]:PORT; port 0 picks one).")
@click.option("--upstream", required=True, type=BIND_ENDPOINT, metavar="ADDR:PORT",
              help="The token server each client gets its own connection to.")
@click.option("--engine", type=click.Choice(["sockmap", "asyncio"]), default="sockmap",
              show_default=True,
              help="sockmap: frames go through the kernel; asyncio: the userspace reference.")
@click.option("--max-length", type=click.IntRange(0, 0x7FFFFFFA), default=None, metavar="BYTES",
              help="Longest frame payload; a longer one breaks its stream (default 1 MiB).")
@click.option("--max-pairs", type=click.IntRange(1, 1 << 20), default=1024, show_default=True,
              help="Clients relayed at once; more are refused.")
@click.option("--drain-timeout", type=click.FloatRange(0), default=5.0, show_default=True,
              metavar="S", help="How long a closing pair waits for its peer to take what is queued.")
@click.option("--max-backlog", type=click.IntRange(1), default=None, metavar="BYTES",
              help="Frame bytes the kernel may queue for a client or upstream that reads "
                   "too slowly; past it the pair is closed (default 4 MiB).")
@click.option("--interval", type=click.FloatRange(0, min_open=True), default=None, metavar="S",
              help="Print stats every S seconds.")
@click.option("--json-stats", "as_json", is_flag=True,
              help="Print stats as JSON lines (every --interval, and at exit).")
@netns_option(SOCKETS_NETNS)
def relay(listen_addr, upstream, engine, max_length, max_pairs, drain_timeout, max_backlog,
          interval, as_json, netns):
    """Relay token frames between clients and an upstream, whole frames only.

    With the sockmap engine (the default) each client and its upstream
    connection are paired in a BPF sockhash: the kernel's stream parser cuts
    both byte streams into frames and a verdict program redirects each one to
    the other socket. A stream that breaks (unknown type, oversize length,
    EOF inside a frame) is reset and counted. Ctrl-C or SIGTERM stops it."""
    from pyxdp.kernel import netns as netns_mod
    from pyxdp.proto import frames

    max_length = frames.DEFAULT_MAX_LENGTH if max_length is None else max_length
    with netns_mod.entered(netns), stop_on_signals() as stop:
        if engine == "sockmap":
            from pyxdp.relay.sockmap_relay import DEFAULT_MAX_BACKLOG, Relay, serve_in_thread

            server = Relay(listen_addr, upstream, max_length=max_length, max_pairs=max_pairs,
                           drain_timeout=drain_timeout,
                           max_backlog=max_backlog or DEFAULT_MAX_BACKLOG)
            thread = serve_in_thread(server)
            window = server.datapath.header_window
            reads = (f"headers read through a {window // 1024} KiB window" if window
                     else "each header read with its own helper call: this kernel has no "
                          "BPF atomic exchange for the window")
            where = f"in the kernel (sockmap + stream parser, {reads})"
        else:
            from pyxdp.relay.asyncio_relay import AsyncioRelay

            server = AsyncioRelay(listen_addr, upstream, max_length=max_length).start()
            thread = None
            where = "in userspace (asyncio reference relay)"
        click.echo(f"relaying {server.address} -> {upstream} {where}, frames up to "
                   f"{max_length} bytes; Ctrl-C to stop", err=True)
        try:
            before, t0 = None, time.monotonic()
            while not stop.wait(interval):
                stats, t1 = server.stats(), time.monotonic()
                if as_json:
                    emit_json(stats)
                else:
                    click.echo(_interval_line(stats, before, t1 - t0))
                before, t0 = stats, t1
        finally:
            server.stop()
            if thread is not None:
                thread.join()
            stats = server.stats()
            if engine == "sockmap":
                server.close()
    if as_json:
        emit_json(stats)
        return
    click.echo(f"relay {stats['listen']} -> {stats['upstream']} stopped")
    click.echo(table(["PAIRS", "COUNT"], [[k, number(v)] for k, v in stats["pairs"].items()]))
    click.echo(table(["CLOSED BECAUSE", "PAIRS"], [[k, number(v)] for k, v in stats["closed"].items()]))
    click.echo(counters_table(stats["counters"]))


@click.command()
@click.option("--listen", "listen_addr", required=True, type=BIND_ENDPOINT, metavar="ADDR:PORT",
              help="Where to serve (port 0 picks one).")
@click.option("--token-delay", type=click.FloatRange(0), default=0.0, show_default=True,
              metavar="MS", help="Pause between tokens, as a model would.")
@json_option("Print the final stats as JSON.")
@netns_option(SOCKETS_NETNS)
def serve(listen_addr, token_delay, as_json, netns):
    """A test token server: PING -> PONG, REQUEST -> TOKENs -> DONE.

    The answer echoes the request's prompt a word per TOKEN (cycled up to
    its max_tokens). A peer that breaks the stream is reset. Ctrl-C or
    SIGTERM stops it."""
    from pyxdp.kernel import netns as netns_mod
    from pyxdp.relay.tokens import TokenServer

    with netns_mod.entered(netns), stop_on_signals() as stop:
        server = TokenServer(listen_addr, token_delay=token_delay / 1000).start()
        click.echo(f"serving tokens on {server.address}; Ctrl-C to stop", err=True)
        try:
            stop.wait()
        finally:
            server.stop()
    stats = vars(server.stats)
    if as_json:
        emit_json({"listen": server.address, **stats})
    else:
        click.echo(", ".join(f"{v} {k}" for k, v in stats.items()))


@click.command()
@click.argument("address", type=BIND_ENDPOINT, metavar="ADDR:PORT")
@click.option("--prompt", default="hello from zerolayer", show_default=True,
              help="The REQUEST's prompt.")
@click.option("--max-tokens", type=click.IntRange(0), default=None, metavar="N",
              help="Ask for N tokens (default: as many as the prompt has words).")
@click.option("--ping", is_flag=True, help="Send a PING first (its PONG is shown too).")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=10.0,
              show_default=True, metavar="S", help="Give up when nothing comes for S seconds.")
@json_option("One JSON object per frame received, then a summary object.")
@netns_option(SOCKETS_NETNS)
def send(address, prompt, max_tokens, ping, timeout, as_json, netns):
    """Send one REQUEST to ADDR:PORT (a token server, or a relay in front of
    one) and print the TOKENs as they arrive, up to DONE."""
    from pyxdp.kernel import netns as netns_mod
    from pyxdp.proto.frames import FrameType
    from pyxdp.relay.tokens import send as send_request

    t0 = time.monotonic()

    def show(frame):
        if as_json:
            record = {"type": frame.type.label,
                      "elapsed_ms": round((time.monotonic() - t0) * 1000, 3)}
            try:
                record["payload"] = frame.payload.decode()
            except UnicodeDecodeError:
                import base64

                record["payload_b64"] = base64.b64encode(frame.payload).decode()
            emit_json(record)
        elif frame.type is FrameType.TOKEN:
            click.echo(frame.payload.decode(errors="replace"), nl=False)
        elif frame.type is FrameType.PONG:
            click.echo("(PONG) ", nl=False)

    with netns_mod.entered(netns):
        ex = send_request(address, prompt, max_tokens=max_tokens, ping=ping, timeout=timeout,
                          on_frame=show)
    tokens = sum(1 for f in ex.frames if f.type is FrameType.TOKEN)
    summary = {"tokens": tokens, "connect_ms": round(ex.connect_s * 1000, 3),
               "first_token_ms": None if ex.first_token_s is None else round(ex.first_token_s * 1000, 3),
               "total_ms": round(ex.total_s * 1000, 3)}
    if as_json:
        emit_json({"summary": summary})
    else:
        click.echo()
        click.echo(f"{tokens} tokens in {summary['total_ms']:.1f} ms "
                   f"(first after {summary['first_token_ms'] or 0:.1f} ms)", err=True)


COMMANDS = [relay, serve, send]
