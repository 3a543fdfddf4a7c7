# SPDX-License-Identifier: Apache-2.0
"""The `tx` section of `zerolayer bench` (section.py): TokenSender against
socket.sendto and sendmmsg(2) (sendmmsg.py), measured by senders.py."""
