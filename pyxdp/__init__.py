# SPDX-License-Identifier: Apache-2.0
"""zerolayer's Python side: loader, pinned-map access, codec, lab and CLI."""

__version__ = "0.1.0"
