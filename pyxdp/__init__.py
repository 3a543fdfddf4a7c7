# SPDX-License-Identifier: Apache-2.0
"""zerolayer's Python side: loader, pinned-map access, codec, lab and CLI."""

# The one place the version is written: pyproject.toml reads it from here.
__version__ = "0.1.0"
