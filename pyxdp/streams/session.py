# SPDX-License-Identifier: Apache-2.0
"""The program's events, into the stream tracker: data with its kernel time
and what was missed before it, connections with their process and
addresses, closes and exits.

A connection is (pid, tls, id): id is the fd for plaintext, the SSL pointer
for TLS, so the tracker can end every connection of a process that exits.
"""

import ctypes
import ipaddress
import socket
import struct
import time
from typing import Any

from pyxdp.streams import probes

# The event's header: every field before the payload.
_HEADER = struct.Struct("=" + "".join(fmt for name, fmt in probes.EVENT.fields if name != "data"))


def _endpoint(family: int, raw: bytes, port: int) -> str | None:
    if family == socket.AF_INET:
        return f"{ipaddress.IPv4Address(raw[:4])}:{port}"
    if family == socket.AF_INET6:
        addr = ipaddress.IPv6Address(raw)
        if addr.ipv4_mapped:
            return f"{addr.ipv4_mapped}:{port}"
        return f"[{addr}]:{port}"
    return None


class Session:
    """Feeds TRACKER from the ring buffer of PROBES: poll() reads what is
    there, then waits; the tracker says what ended."""

    def __init__(self, probes_: probes.Probes, tracker: Any, max_conns: int = 20000):
        self.tracker = tracker
        self.bpf = probes_.bpf
        self.max_conns = max_conns
        # (conn, outgoing): the stream offset the next byte should have
        self._next: dict[tuple[tuple[int, int, int], bool], int] = {}
        self.events = 0
        # Events the tracker failed on: counted, by exception type only, as
        # a message might quote the bytes it was given.
        self.failures: dict[str, int] = {}
        self.bpf[b"zl_st_events"].open_ring_buffer(self._on_event)

    def poll(self, interval_ms: int) -> None:
        """Read what the ring holds, then wait INTERVAL_MS: the program
        never wakes us (docs/spec.md §11.1), so a busy host costs one read
        per interval, not a wake-up per event."""
        self.bpf.ring_buffer_consume()
        time.sleep(interval_ms / 1000)

    def _on_event(self, _ctx, data, size) -> int:
        self.events += 1
        try:
            self._dispatch(data)
        except Exception as exc:  # never printed: see failures
            name = type(exc).__name__
            self.failures[name] = self.failures.get(name, 0) + 1
        return 0

    def _dispatch(self, data) -> None:
        (ts, ident, off, tgid, length, fd, kind, out, tls, family, lport, rport, laddr, raddr,
         comm) = _HEADER.unpack(ctypes.string_at(data, probes.HEADER_LEN))
        conn = (tgid, tls, ident)
        if kind == probes.DATA:
            self._data(conn, bool(out), data, off, length, ts)
        elif kind in (probes.CONN, probes.LINK):
            if kind == probes.CONN:  # tracked anew: its offsets start at 0
                self._next[(conn, False)] = self._next[(conn, True)] = 0
            self.tracker.describe(conn, pid=tgid, comm=comm.split(b"\0", 1)[0].decode(
                errors="replace"), tls=bool(tls), local=_endpoint(family, laddr, lport),
                remote=_endpoint(family, raddr, rport))
        elif kind == probes.CLOSE:
            self._forget(conn)
            self.tracker.closed(conn, ts)
        elif kind == probes.EXIT:
            for key in [k for k in self._next if k[0][0] == tgid]:
                del self._next[key]
            self.tracker.process_exited(tgid, ts)

    def _data(self, conn, out: bool, data, off: int, length: int, ts: int) -> None:
        key = (conn, out)
        expected = self._next.get(key)
        lost = 0 if expected is None else off - expected
        if lost < 0:  # already seen (cannot happen with ordered offsets): skip
            return
        if expected is None and len(self._next) >= 4 * self.max_conns:
            del self._next[next(iter(self._next))]  # bounded: the oldest goes
        self._next[key] = off + length
        payload = ctypes.string_at(data + probes.HEADER_LEN, length) if length else b""
        if payload or lost:
            self.tracker.data(conn, out, payload, ts, lost=lost)

    def _forget(self, conn) -> None:
        self._next.pop((conn, False), None)
        self._next.pop((conn, True), None)
