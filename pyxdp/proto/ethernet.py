# SPDX-License-Identifier: Apache-2.0
"""The link layer around token datagrams: Ethernet and VLAN constants, and
how much a frame may carry beyond the link's MTU (docs/spec.md §1.3).

The C gets ETH_HLEN, the ethertypes and MAX_VLAN_TAGS from here as ZL_*
definitions (pyxdp.xdp.compiler.shared_defines)."""

ETH_HLEN = 14
VLAN_HLEN = 4
ETH_P_IP, ETH_P_IPV6 = 0x0800, 0x86DD
ETH_P_8021Q, ETH_P_8021AD = 0x8100, 0x88A8
VLAN_ETHERTYPES = (ETH_P_8021Q, ETH_P_8021AD)
MAX_VLAN_TAGS = 2  # the parser's walk; a third tag is not a token datagram

# What a link accepts beyond its MTU: the Ethernet header and one VLAN tag.
# The generator and replay size templates against it.
LINK_L2_OVERHEAD = ETH_HLEN + VLAN_HLEN
# The longest L2 header zerolayer parses: AF_XDP chunks are sized for it.
PARSED_L2_OVERHEAD = ETH_HLEN + MAX_VLAN_TAGS * VLAN_HLEN
