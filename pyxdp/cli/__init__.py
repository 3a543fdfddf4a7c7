# SPDX-License-Identifier: Apache-2.0
"""The `zerolayer` command: a thin click layer over the pyxdp library.

Each command module parses options, calls the library and prints. Expected
failures arrive as ZerolayerError and leave as one line on stderr and exit 1;
usage errors are click's exit 2. Command modules import heavy libraries (libbpf,
scapy) inside the commands, so that `status` and `stats` start quickly.
"""

import os
import sys

import click

from pyxdp import __version__
from pyxdp.errors import ZerolayerError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="zerolayer")
def cli():
    """Move LLM token frames from the NIC into a program, with XDP and AF_XDP."""


def _register() -> None:
    from pyxdp.cli import (
        apply_commands,
        bench_commands,
        build_commands,
        emit_commands,
        lab_commands,
        listen_commands,
        observe_commands,
        relay_commands,
        streams_commands,
        tune_commands,
        xdp_commands,
    )

    for module in (xdp_commands, tune_commands, lab_commands, listen_commands, bench_commands,
                   observe_commands, relay_commands, emit_commands, apply_commands,
                   streams_commands, build_commands):
        for command in module.COMMANDS:
            cli.add_command(command)


def main() -> None:
    _register()
    try:
        code = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("zerolayer: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except ZerolayerError as exc:
        click.echo(f"zerolayer: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # an unexpected failure is still one line
        if os.environ.get("ZEROLAYER_DEBUG"):
            raise
        click.echo(
            f"zerolayer: internal error: {type(exc).__name__}: {exc} "
            "(rerun with ZEROLAYER_DEBUG=1 for a traceback and report it)",
            err=True,
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
