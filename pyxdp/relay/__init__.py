"""The TCP token-frame relay: the in-kernel sockmap relay, its asyncio reference, and a test token server and client."""
