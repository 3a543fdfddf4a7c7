# SPDX-License-Identifier: Apache-2.0
"""The BPF programs' C sources, shipped as package data of pyxdp: each built
by clang into a CO-RE object, once, and loaded by libbpf
(pyxdp.xdp.compiler)."""

from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
