# SPDX-License-Identifier: Apache-2.0
"""`zerolayer build`: every BPF object a command loads, built by clang into
root's object cache ahead of use (provisioning, the VM images and the
container image run it), so that no command compiles."""

import importlib
import os

import click

from pyxdp.cli.options import json_option
from pyxdp.cli.render import emit_json
from pyxdp.errors import ZerolayerError

# The modules that name what they load (compiler.shipped()): importing them
# is what lists every object. The docs test holds every caller here.
OWNERS = (
    "pyxdp.xdp.compiler",
    "pyxdp.relay.datapath",
    "pyxdp.streams.probes",
    "pyxdp.lab.generator",
    "pyxdp.lab.routed_lab",
    "pyxdp.bench.floors",
    "pyxdp.bench.streams.loops",
)


@click.command()
@json_option("Print one JSON object: each object built or found, and the totals.")
def build(as_json):
    """Build every BPF object zerolayer loads into its cache, once."""
    from pyxdp.xdp import compiler, objects

    if os.geteuid() != 0:
        raise ZerolayerError(f"zerolayer build writes root's object cache "
                             f"({objects.CACHE.path(objects.CACHE_DIR)}): run it with sudo")
    for owner in OWNERS:
        importlib.import_module(owner)
    done = compiler.build_shipped()
    built = sum(d.compiled for d in done)
    if as_json:
        emit_json({"objects": [{"source": d.build.source, "variant": d.build.variant or None,
                                "cflags": list(d.build.cflags),
                                "compiled": d.compiled, "seconds": round(d.seconds, 3)}
                               for d in done],
                   "built": built, "cached": len(done) - built})
        return
    for d in done:
        state = f"built in {d.seconds:.2f} s" if d.compiled else "cached"
        name = f"{d.build.source} ({d.build.variant})" if d.build.variant else d.build.source
        click.echo(f"{name:<36} {state}")
    click.echo(f"{len(done)} objects: {built} built, {len(done) - built} already in "
               f"{objects.CACHE.path(objects.CACHE_DIR)}")


COMMANDS = (build,)
