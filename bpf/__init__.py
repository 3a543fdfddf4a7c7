# SPDX-License-Identifier: Apache-2.0
"""The XDP C sources, shipped as package data of pyxdp and compiled by bcc."""

from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
