# SPDX-License-Identifier: Apache-2.0
"""The `delivery` section of `zerolayer bench` (section.py): pyxdp's AF_XDP
socket against a UDP socket at three tiers of work per frame (tiers.py),
one round of it in xsk_vs_udp.py, and a C consumer on libxdp at the touch
tier (xsk_consumer.c, built by c_consumer.py)."""
