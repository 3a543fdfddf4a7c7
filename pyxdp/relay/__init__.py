# SPDX-License-Identifier: Apache-2.0
"""The TCP token-frame relay: the in-kernel sockmap relay, its asyncio reference, and a test token server and client."""
