# SPDX-License-Identifier: Apache-2.0
"""`python -m pyxdp` is the `zerolayer` command."""

from pyxdp.cli import main

main()
