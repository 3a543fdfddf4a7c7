# SPDX-License-Identifier: Apache-2.0
"""The `relay` section of `zerolayer bench` (section.py): zerolayer's TCP
relays against their peers (peers.py, with splice_relay.c) under one load
(load.py), on loopback."""
