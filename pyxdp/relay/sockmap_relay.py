# SPDX-License-Identifier: Apache-2.0
"""`zerolayer relay`: a TCP token-frame relay whose data path is the kernel.

Each client gets its own upstream connection. The two sockets join the
relay's sockhash as a pair (pyxdp/relay/datapath.py): from then on the kernel's
stream parser cuts each byte stream into whole frames and the verdict
program redirects them to the other socket. Requests go up, tokens come
down, and no payload byte enters this process. What is left here is the
control plane: accept, connect, pair, notice when a side ends, and tear the
pair down without losing a frame that was already whole.

How a pair ends (each end is counted by reason):
- A side sends EOF at a frame boundary: its frames are drained into the other
  socket, the EOF is passed on (shutdown), and the other direction goes on
  until it ends too (a half-close, as socat does). Then both are closed.
- A side breaks the stream (unknown type, oversize length: the parser sets
  the socket's error), resets, or sends EOF in the middle of a frame: the
  partial frame is dropped by the kernel, the whole frames before it are
  drained into the other socket, that one gets an EOF, and the offender a
  RST.
- A side reads so much slower than the other sends that more than
  max_backlog bytes of frames wait in the kernel for it: the pair is closed
  at once, the slow reader with a RST (slow_reader). The kernel's queue
  between sockets of a sockhash has no bound of its own: this is the bound.
Drains wait at most drain_timeout; a peer that does not read in that time
loses what was queued for it (drain_timeout).

A socket whose peer sent its FIN before the pair was made cannot join a
sockhash (the kernel takes only established sockets): such a pair is relayed
by the asyncio reference relay instead, by the same rules, and counted.
"""

import errno
import os
import select
import socket
import threading
import time
from dataclasses import dataclass, field

from pyxdp.proto import counters, frames
from pyxdp.relay import sockets as relay_sockets
from pyxdp.relay.asyncio_relay import AsyncioRelay
from pyxdp.relay.datapath import ConnState, RelayDataPath
from pyxdp.relay.schema import BROKEN, CLOSE_REASONS, ERRNO_REASONS, FIELDS

_ENDED = select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR
_TICK = 0.002  # how often closing pairs are looked at
_BACKLOG_CHECK = 0.25  # how often open pairs' backlogs are
# Frame bytes the kernel may hold for a socket that does not read fast enough.
# The kernel's queue between two sockets of a sockhash has no limit of its
# own (and each queued message costs kernel memory on top of its frames).
DEFAULT_MAX_BACKLOG = 4 << 20


@dataclass(eq=False)
class Side:
    sock: socket.socket
    cookie: int = 0
    written_base: int = 0  # relay_sockets.bytes_written() when paired
    eof: bool = False      # its peer sent EOF (seen, not yet handled)
    done: bool = False     # ... handled: drained and passed on
    closed: bool = False   # shut down for writing by us


@dataclass(eq=False)
class Pair:
    client: Side
    upstream: Side
    state: str = "connecting"  # -> "open" -> "closed"
    failure: tuple[Side, str] | None = None  # the side that failed, and why
    deadline: float = 0.0  # of the wait in progress (for the parser, a drain)

    def other(self, side: Side) -> Side:
        return self.upstream if side is self.client else self.client

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.client, self.upstream


@dataclass
class RelayCounts:
    accepted: int = 0
    active: int = 0  # pairs connecting, open or closing (kept here: stats() reads it from
    #                  another thread, which must not walk the relay's dicts)
    refused: int = 0
    upstream_unreachable: int = 0
    userspace: int = 0  # pairs the kernel refused, relayed by the asyncio relay
    closed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLOSE_REASONS, 0))


class Relay:
    """Listen on LISTEN, relay each client to its own connection to UPSTREAM.

    serve() runs until stop() (from another thread or a signal handler).
    DATAPATH may be shared between relays run one after the other (tests);
    otherwise the relay compiles and loads its own and frees it on close().
    """

    def __init__(self, listen: str, upstream: str, *,
                 max_length: int = frames.DEFAULT_MAX_LENGTH, max_pairs: int = 1024,
                 drain_timeout: float = 5.0, max_backlog: int = DEFAULT_MAX_BACKLOG,
                 datapath: RelayDataPath | None = None):
        self.upstream = upstream
        # Both addresses are checked before the compile, so that a typo fails at once.
        self._upstream_family, self._upstream_addr = relay_sockets.parse_address(upstream)
        relay_sockets.parse_address(listen)
        self.max_pairs = max_pairs
        self.drain_timeout = drain_timeout
        self.max_backlog = max_backlog
        self._counts = RelayCounts()
        self._owns_datapath = datapath is None
        self._pairs: dict[int, tuple[Pair, Side]] = {}  # fd -> (pair, side)
        self._closing: list[Pair] = []
        self._stop = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._epoll = select.epoll()
        self._listener = None
        self._userspace: AsyncioRelay | None = None
        try:
            if datapath is None:
                datapath = RelayDataPath(max_socks=2 * max_pairs, max_length=max_length)
                datapath.self_check()
            else:
                datapath.set_max_length(max_length)
            self.datapath = datapath
            self._kernel_base = datapath.read_counters()
            self._userspace = AsyncioRelay(None, upstream, max_length=max_length).start()
            self._listener = relay_sockets.listener(listen)
            self._set_rcvbuf(self._listener)
            self._listener.setblocking(False)
            self.address = relay_sockets.format_address(self._listener.getsockname())
            self._epoll.register(self._listener.fileno(), select.EPOLLIN)
            self._epoll.register(self._wake_r, select.EPOLLIN)
        except BaseException:
            self._free(datapath)
            raise

    # --- running ---------------------------------------------------------------------

    def serve(self) -> None:
        """Run until stop()."""
        next_check = time.monotonic() + _BACKLOG_CHECK
        try:
            while not self._stop:
                for fd, events in self._epoll.poll(_TICK if self._closing else _BACKLOG_CHECK):
                    self._dispatch(fd, events)
                self._step_closing()
                if time.monotonic() >= next_check:
                    self._check_backlogs()
                    next_check = time.monotonic() + _BACKLOG_CHECK
        finally:
            self._close_all()

    def stop(self) -> None:
        """Make serve() return; safe from another thread or a signal handler."""
        self._stop = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def set_max_length(self, max_length: int) -> None:
        assert self._userspace is not None and self._listener is not None, "the relay is closed"
        self.datapath.set_max_length(max_length)
        self._userspace.max_length = max_length
        self._set_rcvbuf(self._listener)  # clients accepted from now on inherit it

    def close(self) -> None:
        self._close_all()
        self._free(self.datapath)

    def _free(self, datapath) -> None:
        if self._userspace is not None:
            self._userspace.stop()
            self._userspace = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1
        self._epoll.close()
        if self._owns_datapath and datapath is not None:
            datapath.close()

    # --- stats -------------------------------------------------------------------------

    def stats(self) -> dict:
        """The `zerolayer relay --json-stats` object (from any thread)."""
        kernel = self.datapath.read_counters()
        s, user = self._counts, self._userspace
        assert user is not None, "the relay is closed"
        closed = {k: s.closed[k] + user.closed[k] for k in CLOSE_REASONS}
        return {
            "engine": "sockmap",
            "listen": self.address,
            "upstream": self.upstream,
            "max_length": self.datapath.max_length(),
            "pairs": {
                "accepted": s.accepted,
                "active": s.active + user.pairs["active"],
                "closed": sum(closed.values()),
                "refused": s.refused,
                "upstream_unreachable": s.upstream_unreachable,
                "userspace": s.userspace,
            },
            "closed": closed,
            # frames the kernel relayed, plus those of userspace pairs
            "counters": counters.nest({k: v + user.counters[k] for k, v in
                                       counters.delta(kernel, self._kernel_base, FIELDS).items()},
                                      FIELDS),
        }

    # --- events ------------------------------------------------------------------------

    def _dispatch(self, fd: int, events: int) -> None:
        if fd == self._wake_r:
            try:
                os.read(self._wake_r, 64)
            except BlockingIOError:
                pass
            return
        if self._listener is not None and fd == self._listener.fileno():
            self._accept()
            return
        entry = self._pairs.get(fd)
        if entry is None:
            return
        pair, side = entry
        if pair.state == "open":
            self._side_ended(pair, side)
        elif side is pair.upstream:
            self._connected(pair)
        else:
            # The client ended before the upstream answered: a client that
            # sent its request and half-closed still gets its answer.
            self._unwatch(side.sock)
            if relay_sockets.pending_error(side.sock):
                self._counts.closed["reset"] += 1
                self._forget(pair)
            else:
                side.eof = True

    def _accept(self) -> None:
        assert self._listener is not None  # only the open relay's epoll calls this
        while True:
            try:
                client, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # EMFILE and the like: keep serving the others
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return
                raise
            self._counts.accepted += 1
            if self._counts.active >= self.max_pairs:
                self._counts.refused += 1
                client.close()
                continue
            self._open_upstream(client)

    def _open_upstream(self, client: socket.socket) -> None:
        upstream = socket.socket(self._upstream_family, socket.SOCK_STREAM)
        upstream.setblocking(False)
        self._set_rcvbuf(upstream)
        for sock in (client, upstream):
            # Frames go out as the kernel relays them, not held for Nagle.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = Pair(Side(client), Side(upstream))
        err = upstream.connect_ex(self._upstream_addr)
        if err not in (0, errno.EINPROGRESS):
            self._counts.upstream_unreachable += 1
            upstream.close()
            client.close()
            return
        self._counts.active += 1
        self._pairs[client.fileno()] = (pair, pair.client)
        self._pairs[upstream.fileno()] = (pair, pair.upstream)
        self._epoll.register(client.fileno(), _ENDED)
        self._epoll.register(upstream.fileno(), select.EPOLLOUT | _ENDED)

    def _connected(self, pair: Pair) -> None:
        up = pair.upstream
        if relay_sockets.pending_error(up.sock):
            self._counts.upstream_unreachable += 1
            self._forget(pair)
            return
        for side in pair.sides:
            side.written_base = relay_sockets.bytes_written(side.sock)
        try:
            up.cookie, pair.client.cookie = self.datapath.pair(up.sock, pair.client.sock)
        except OSError:
            self._hand_to_userspace(pair)
            return
        self._epoll.modify(up.sock.fileno(), _ENDED)
        pair.state = "open"
        if pair.client.eof:
            self._wait(pair)

    def _hand_to_userspace(self, pair: Pair) -> None:
        """The kernel refused a socket of the pair (its peer already sent a
        FIN: a sockhash takes only established sockets). The pair is relayed
        by the asyncio relay instead, under the same rules, and counted."""
        for side in pair.sides:
            self._pairs.pop(side.sock.fileno(), None)
            self._unwatch(side.sock)
        self._counts.active -= 1
        self._counts.userspace += 1
        assert self._userspace is not None
        self._userspace.adopt(pair.client.sock, pair.upstream.sock)

    def _side_ended(self, pair: Pair, side: Side) -> None:
        """SIDE's peer sent EOF, reset, or broke the stream (the parser's error)."""
        self._unwatch(side.sock)  # it stays readable: look once
        err = relay_sockets.pending_error(side.sock)
        if err:
            self._fail(pair, side, ERRNO_REASONS.get(err, "reset"))
        else:
            side.eof = True
            self._wait(pair)

    def _fail(self, pair: Pair, side: Side, reason: str) -> None:
        if pair.failure is None:
            pair.failure = (side, reason)
            self._wait(pair)

    def _wait(self, pair: Pair) -> None:
        """Start a bounded wait (for the parser, then a drain) on PAIR."""
        pair.deadline = time.monotonic() + self.drain_timeout
        if pair not in self._closing:
            self._closing.append(pair)

    # --- closing -------------------------------------------------------------------------

    def _step_closing(self) -> None:
        for pair in list(self._closing):
            if self._step(pair):
                self._closing.remove(pair)

    def _step(self, pair: Pair) -> bool:
        """Advance a pair's teardown; True when nothing is left to wait for
        (closed, or half-closed until the other side ends)."""
        now = time.monotonic()
        if pair.failure is not None:
            side, reason = pair.failure
            # A reset can overtake data the parser has not reached yet (it
            # runs later when the socket was busy): let it finish, then drain.
            caught_up = reason in BROKEN or self._parsed_all(side)
            if not (caught_up and self._drained(side, pair.other(side))) and now < pair.deadline:
                return False
            self._finish(pair, reason, offender=side)
            return True
        for side in pair.sides:
            if not side.eof or side.done:
                continue
            tail = self._tail(side)
            if tail == "pending" and now < pair.deadline:
                return False
            if tail != "clean":
                self._fail(pair, side, "desync" if tail == "pending" else tail)
                return False
            other = pair.other(side)
            if not self._drained(side, other):
                if now < pair.deadline:
                    return False
                self._finish(pair, "drain_timeout")
                return True
            self._shutdown(other)
            side.done = True
        if all(side.done for side in pair.sides):
            self._finish(pair, "eof")
        return True

    def _parsed_all(self, side: Side) -> bool:
        """Has the parser seen everything SIDE received? (After a reset we do
        not know whether a FIN came first, and counted as one byte.)"""
        received = relay_sockets.bytes_received(side.sock)
        st = self.datapath.conn(side.cookie)
        return any(_stream_end(st, data) != "pending" for data in (received, received - 1))

    def _tail(self, side: Side) -> str:
        """How SIDE's stream ended, after its EOF (see _stream_end)."""
        data = relay_sockets.bytes_received(side.sock) - 1  # the FIN counts as one
        return _stream_end(self.datapath.conn(side.cookie), data)

    def _backlog(self, src: Side, dst: Side) -> int:
        """Bytes of frames the kernel relayed from SRC that have not reached
        DST's TCP send queue yet: they wait in the kernel's queue for DST,
        which taking DST out of the sockhash would drop."""
        st = self.datapath.conn(src.cookie)
        if st is None:
            return 0
        try:
            written = relay_sockets.bytes_written(dst.sock) - dst.written_base
        except OSError:
            return 0  # DST is gone: nothing more can reach it
        return st.frame_bytes - written

    def _drained(self, src: Side, dst: Side) -> bool:
        return self._backlog(src, dst) <= 0

    def _check_backlogs(self) -> None:
        """A peer that reads slower than its pair sends makes the kernel
        queue frames for it without bound: past max_backlog, close the pair
        (the slow reader with a RST: what was queued for it is lost)."""
        for pair in {p for p, _ in self._pairs.values()}:
            if pair.state != "open" or pair.failure is not None:
                continue
            for src in pair.sides:
                dst = pair.other(src)
                if not dst.closed and self._backlog(src, dst) > self.max_backlog:
                    self._finish(pair, "slow_reader", offender=dst)
                    break

    def _shutdown(self, side: Side) -> None:
        if not side.closed:
            side.closed = True
            try:
                side.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # already reset by its peer

    def _finish(self, pair: Pair, reason: str, offender: Side | None = None) -> None:
        self._counts.closed[reason] += 1
        if offender is not None and (reason in BROKEN or reason == "slow_reader"):
            relay_sockets.reset_on_close(offender.sock)
        for side in pair.sides:
            if side is not offender:
                self._shutdown(side)
        self._forget(pair)

    def _forget(self, pair: Pair) -> None:
        """Out of the maps, out of epoll, closed."""
        pair.state = "closed"
        self._counts.active -= 1
        self.datapath.unpair(*(s.cookie for s in pair.sides if s.cookie))
        for side in pair.sides:
            self._pairs.pop(side.sock.fileno(), None)
            self._unwatch(side.sock)
            side.sock.close()

    def _unwatch(self, sock: socket.socket) -> None:
        try:
            self._epoll.unregister(sock.fileno())
        except FileNotFoundError:
            pass  # already: its end was seen

    def _close_all(self) -> None:
        for pair in {p for p, _ in self._pairs.values()}:
            self._counts.closed["relay_stopped"] += 1
            self._forget(pair)
        self._closing.clear()

    def _set_rcvbuf(self, sock: socket.socket) -> None:
        """The stream parser refuses a frame longer than the socket's receive
        buffer (EMSGSIZE): make room for the longest one allowed."""
        relay_sockets.ensure_rcvbuf(sock, self.datapath.max_length() + frames.HEADER_LEN)


def _stream_end(st: ConnState | None, data: int) -> str:
    """A socket's DATA bytes all in, and ST its parser's state: did its stream
    end at a frame boundary ("clean"), in a header ("short_header") or a
    payload ("truncated"), or has the parser not caught up with them
    ("pending")?"""
    if st is None or not st.started:
        return "clean" if data <= 0 else "pending"
    end = (st.first_seq + data) & 0xFFFFFFFF
    if not st.in_msg:
        return "clean" if st.next_seq == end else "pending"
    if st.msg_len:
        msg_end = (st.next_seq + st.msg_len) & 0xFFFFFFFF
        return "truncated" if _seq_after(msg_end, end) else "pending"
    return "short_header" if st.seen_end == end else "pending"


def _seq_after(a: int, b: int) -> bool:
    """TCP sequence number A is after B (modulo 2^32)."""
    return 0 < ((a - b) & 0xFFFFFFFF) < 0x80000000


def serve_in_thread(relay: Relay) -> threading.Thread:
    """Run RELAY.serve() in a daemon thread (tests, the benchmark)."""
    thread = threading.Thread(target=relay.serve, name="zerolayer-relay", daemon=True)
    thread.start()
    return thread
