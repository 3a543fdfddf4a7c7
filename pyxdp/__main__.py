"""`python -m pyxdp` is the `zerolayer` command."""

from pyxdp.cli import main

main()
