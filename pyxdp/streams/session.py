# SPDX-License-Identifier: Apache-2.0
"""The program's events, into the stream tracker: data with its kernel time
and what was missed before it, connections with their process and
addresses, closes and exits.

A connection is (pid, tls, id): id is the fd for plaintext, the SSL pointer
for TLS, so the tracker can end every connection of a process that exits.
A close says how many bytes the connection carried, so bytes the ring lost
at its very end are known too; a fork makes the parent's connections the
child's as well (the tracker keeps them one); an evicted connection is
ignored by the kernel too, until its fd is closed.
"""

import contextlib
import mmap
import socket
import struct
import time
from typing import Any

from pyxdp.kernel import bpfsys
from pyxdp.streams import probes
from pyxdp.streams.identity import Identities
from pyxdp.streams.leftovers import Leftovers
from pyxdp.streams.probes import (
    CLOSE,
    CONN,
    DATA,
    EVICTED,
    EXIT,
    EXIT_KEY,
    FORK,
    FORK_KEY,
    HEADER_LEN,
    LINK,
    SHARED,
)
from pyxdp.streams.ring import Ring

# The event's header, every field before the payload, in two parts: the
# first (up to tls) is all a DATA event needs; the rest describes a
# connection (CONN, LINK).
_FIELDS = [fmt for name, fmt in probes.EVENT.fields if name != "data"]
_SPLIT = [name for name, _ in probes.EVENT.fields].index("tls") + 1
_COMMON = struct.Struct("=" + "".join(_FIELDS[:_SPLIT]))
_DESCRIBED = struct.Struct("=" + "".join(_FIELDS[_SPLIT:]))
_V4_MAPPED = bytes(10) + b"\xff\xff"


def _endpoint(family: int, raw: bytes, port: int) -> str | None:
    if family == socket.AF_INET:
        return f"{socket.inet_ntop(socket.AF_INET, raw[:4])}:{port}"
    if family == socket.AF_INET6 and raw[:12] == _V4_MAPPED:
        return f"{socket.inet_ntop(socket.AF_INET, raw[12:16])}:{port}"
    if family == socket.AF_INET6:
        return f"[{socket.inet_ntop(socket.AF_INET6, raw)}]:{port}"
    return None


class Session:
    """Feeds TRACKER from the ring buffer of PROBES: poll() reads what is
    there, then waits; the tracker says what ended. close() unmaps the ring."""

    def __init__(self, probes_: probes.Probes, tracker: Any, max_conns: int = 20000):
        self.tracker = tracker
        self.max_conns = max_conns
        # (conn, out 0 or 1): the stream offset the next byte should have
        self._next: dict[tuple[tuple[int, int, int], int], int] = {}
        self.events = 0
        # Events the tracker failed on: counted, by exception type only, as
        # a message might quote the bytes it was given.
        self.failures: dict[str, int] = {}
        self.ends_missed = 0  # closes and exits the ring had no room for, taken from a map
        # DATA events behind the bytes already seen, dropped: none should come
        # (each direction's offsets are in order), so any is worth a report
        self.behind = 0
        self._missed_table = probes_.tables["zl_st_ends_missed"]
        self._conns = probes_.tables["zl_st_conns"]
        self._ignored = probes_.tables["zl_st_ignored"]
        self._refused = probes_.tables["zl_st_refused"]
        tracker.on_evicted = self._evicted
        self.leftovers = Leftovers(probes_.tables)
        self.identities = Identities()  # who each process is (its unit, container, pod)
        self.ring = Ring(probes_.ring_fd, probes.RING_PAGES * mmap.PAGESIZE)

    def poll(self, interval_ms: int) -> None:
        """Read what the ring holds, then wait INTERVAL_MS: the program
        never wakes us (docs/spec.md §11.1), so a busy host costs one read
        per interval, not a wake-up per event. A ring found more than a
        quarter full is read again at once, before it fills."""
        missed = self._ends_missed()
        records = self.ring.read()
        view = self.ring.view
        self.events += len(records)
        expect, data, unpack, skip = self._next, self.tracker.data, _COMMON.unpack_from, HEADER_LEN
        for at, _size in records:
            ts, ident, off, aux, tgid, length, fd, uid, kind, out, tls = unpack(view, at)
            conn = (tgid, tls, ident)
            if missed and missed[0][0] <= ts:
                self._end_missed(missed, ts)
            try:
                if kind != DATA:
                    self._dispatch(view, at, kind, conn, ts, off, aux, uid)
                    continue
                # DATA, the one event of every read and write: inline
                key = (conn, out)
                expected = expect.get(key)
                lost = 0 if expected is None else off - expected
                if lost < 0:  # already seen
                    self.behind += 1
                    continue
                if expected is None and len(expect) >= 4 * self.max_conns:
                    del expect[next(iter(expect))]  # bounded: the oldest goes
                expect[key] = off + length
                if length or lost:
                    at += skip
                    data(conn, out == 1, view[at:at + length].tobytes(), ts, lost)
            except Exception as exc:  # never printed: see failures
                name = type(exc).__name__
                self.failures[name] = self.failures.get(name, 0) + 1
        self.ring.release()
        if missed:
            self._end_missed(missed, None)
        self.leftovers.clear_due()
        if self.ring.backlog < self.ring.size // 4:
            time.sleep(interval_ms / 1000)

    def close(self) -> None:
        self.ring.close()

    def refused(self) -> dict[str, int]:
        """The events the full ring refused so far, by what they carried
        (bpf/streams.bpf.c zl_st_refused): data pieces (their bytes show as
        lost) and new connections' descriptions (each told again at a later
        call; those retries are not counted)."""
        out: dict[str, int] = {}
        for kind, name in ((DATA, "data"), (CONN, "described")):
            value = self._refused.get((kind,))
            if value and value[0]:
                out[name] = value[0]
        return out

    def _ends_missed(self) -> list[tuple]:
        """The ends the program could not put in a full ring (bpf/streams.bpf.c
        zl_st_ends_missed), taken out, oldest first, as (time, connection,
        what its event said: off, aux, flags)."""
        table = self._missed_table
        items = table.items()  # one system call when empty, the usual case
        for k, _ in items:
            table.delete(k)
        self.ends_missed += len(items)
        return sorted((ts, k, off, aux, flags) for k, (ts, off, aux, flags) in items)

    def _end_missed(self, missed: list, until: int | None) -> None:
        """The missed ends up to time UNTIL (all of them: None), in their
        place among the ring's events."""
        while missed and (until is None or missed[0][0] <= until):
            ts, conn, off, aux, flags = missed.pop(0)
            kind = {EXIT_KEY: EXIT, FORK_KEY: FORK}.get(conn[1], CLOSE)
            self._dispatch(None, 0, kind, conn, ts, off, aux, 0, flags)

    def _dispatch(self, view, at: int, kind: int, conn: tuple, ts: int, off: int, aux: int,
                  uid: int, flags: int | None = None) -> None:
        tgid, tls = conn[0], conn[1]
        if kind in (CONN, LINK):
            if kind == CONN:  # tracked anew: its offsets start at 0
                self._next[(conn, 0)] = self._next[(conn, 1)] = 0
            else:  # the same, when its CONN found the ring full (told again)
                self._next.setdefault((conn, 0), 0)
                self._next.setdefault((conn, 1), 0)
            flags, family, lport, rport, laddr, raddr, comm = _DESCRIBED.unpack_from(
                view, at + _COMMON.size)
            self.tracker.describe(conn, pid=tgid, comm=comm.split(b"\0", 1)[0].decode(
                errors="replace"), tls=bool(tls), local=_endpoint(family, laddr, lport),
                remote=_endpoint(family, raddr, rport), uid=uid, socket=aux or None,
                who=self.identities.of(tgid))
        elif kind == CLOSE:
            if flags is None:
                flags = _DESCRIBED.unpack_from(view, at + _COMMON.size)[0]
            self._lost_at_end(conn, off, aux, ts)
            self._forget(conn)
            self.tracker.closed(conn, ts, shared=bool(flags & SHARED))
        elif kind == EXIT:
            # what the kernel counted on its connections, before the leftovers go
            for held in {k[0] for k in self._next if k[0][0] == tgid}:
                entry = self._conns.get(held)
                if entry is not None:
                    self._lost_at_end(held, entry[0], entry[1], ts)
            for key in [k for k in self._next if k[0][0] == tgid]:
                del self._next[key]
            self.leftovers.exited(tgid)
            self.identities.exited(tgid)
            self.tracker.process_exited(tgid, ts)
        elif kind == FORK:
            for child in self.tracker.forked(tgid, aux):
                # The kernel tracks the child's key from its next call, counting
                # from 0, unless a call of the child's came first and made the
                # entry itself (then its CONN follows in the ring).
                with contextlib.suppress(OSError):  # it exists, or the map is full
                    self._conns.set(child, (0, 0, 0, 1), bpfsys.BPF_NOEXIST)
                    self._next[(child, 0)] = self._next[(child, 1)] = 0

    def _lost_at_end(self, conn: tuple, seen_in: int, seen_out: int, ts: int) -> None:
        """Bytes the connection carried (the kernel's counts at its end)
        that never reached us: the ring was full for its last pieces."""
        for out, seen in ((0, seen_in), (1, seen_out)):
            expected = self._next.get((conn, out))
            if expected is not None and seen > expected:
                self._next[(conn, out)] = seen
                self.tracker.data(conn, out == 1, b"", ts, seen - expected)

    def _evicted(self, conn: tuple) -> None:
        """The tracker evicted CONN: the kernel ignores it too until its fd
        closes, so its later bytes cost no copy and never come back as a
        stream joined mid-way."""
        with contextlib.suppress(OSError):
            self._conns.delete(conn)
        with contextlib.suppress(OSError):
            self._ignored.set(conn, (EVICTED,))
        self._forget(conn)

    def _forget(self, conn) -> None:
        self._next.pop((conn, 0), None)
        self._next.pop((conn, 1), None)
