# SPDX-License-Identifier: Apache-2.0
"""The `streams` section of `zerolayer bench`: what observing token streams
(`zerolayer streams`) costs the processes observed, and the observer itself
(pyxdp/bench/streams/section.py)."""
