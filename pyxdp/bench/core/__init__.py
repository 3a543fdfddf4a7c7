# SPDX-License-Identifier: Apache-2.0
"""The `core` section of `zerolayer bench` (section.py): what a batch costs
Python's receive and send paths, pure core against compiled, measured on
synthetic rings by cost.py."""
