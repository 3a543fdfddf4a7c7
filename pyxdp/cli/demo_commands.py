"""`zerolayer demo`: the main job on a lab it builds and removes itself."""

import click

from .render import number, table


@click.command()
@click.option("--streams", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Concurrent token streams to replay.")
def demo(streams):
    """Attach to a veth lab, replay token streams, show what XDP counted."""
    from .. import demo as demo_mod
    from ..privileges import require_bpf_admin
    from .. import pins

    require_bpf_admin("zerolayer demo")
    pins.require_bpffs()
    report = demo_mod.run(streams=streams, progress=click.echo)

    click.echo("\nstreams received by a plain UDP socket in the dut namespace "
               "(no AF_XDP socket registered, so valid datagrams fall back to the kernel):")
    for s in report.streams:
        state = "DONE" if s.done else "unfinished"
        click.echo(f"  {s.flow:<24} {s.prompt!r} -> {s.text!r} ({s.tokens} tokens, {state})")

    rows = [[k, number(report.counters[k]), number(report.expected[k]),
             "" if report.counters[k] == report.expected[k] else "MISMATCH"]
            for k in report.counters]
    click.echo("\nXDP counters on dut0, against the reference judge's expectation:")
    click.echo(table(["COUNTER", "COUNTED", "EXPECTED", ""], rows))
    demo_mod.check(report)
    click.echo("\nevery counter matches the reference judge; program detached, lab removed")


COMMANDS = [demo]
