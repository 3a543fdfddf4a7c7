# SPDX-License-Identifier: Apache-2.0
"""The token frame protocol (docs/spec.md §1 to §4): the codec, the reference judge, the counter schema, stream reassembly and the scapy layer. No kernel access."""
