# SPDX-License-Identifier: Apache-2.0
"""Labs of namespaces and veth pairs, token traffic, the line-rate generator, replay and the demo."""
