# SPDX-License-Identifier: Apache-2.0
"""The live table of `zerolayer streams`: one row per stream, newest first."""

from pyxdp.human import table

HEADERS = ["PID", "COMM", "SIDE", "TLS", "PEER", "API", "MODEL", "TTFT ms", "CHUNKS", "TOKENS",
           "GAP p50/p99/max ms", "STALLS", "STATE"]


def _ms(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def row(s: dict) -> list[str]:
    gap = s.get("chunk_gap_ms")
    gaps = "-" if not gap else f"{gap['p50']:.1f}/{gap['p99']:.1f}/{gap['max']:.1f}"
    return [str(s["pid"]), s.get("comm") or "?", s["side"], "yes" if s.get("tls") else "no",
            s.get("remote") or "-", s["api"], (s.get("model") or "-")[:24],
            _ms(s.get("time_to_first_chunk_ms")), str(s["chunks"]),
            "-" if s.get("tokens") is None else str(s["tokens"]), gaps, str(s["stalls"]),
            s["status"]]


def render(streams: list[dict], counters: dict, footer: str, limit: int = 40) -> str:
    """STREAMS (open and ended) newest first, at most LIMIT rows, then the
    counters and FOOTER (what cannot be seen)."""
    newest = sorted(streams, key=lambda s: s.get("started_ns") or 0, reverse=True)[:limit]
    body = table(HEADERS, [row(s) for s in newest]) if newest else "(no stream yet)"
    counted = ", ".join(f"{k} {v}" for k, v in counters.items() if v)
    return f"{body}\n\n{counted or 'nothing counted yet'}\n{footer}\n"
