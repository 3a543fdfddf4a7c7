# SPDX-License-Identifier: Apache-2.0
"""The TCP frame relay's kernel side: bpf/sk_relay.bpf.c's stream parser and
verdict, attached to a sockhash of relayed sockets, and typed access to the
relay's maps.

The sockhash is made here with bpf(2), before the object loads, and libbpf
uses it for the object's zl_sk_socks (docs/spec.md §7.2). Sockets are keyed
by their cookie. A second map, zl_sk_conns, holds per socket the
cookie of its pair (where its frames go) and the parser's framing state.

Nothing is pinned: the maps and programs live as long as this object (the
relay process), and closing it detaches and frees them.
"""

import errno
import os
import platform
import socket
import struct
import time
from dataclasses import dataclass

from pyxdp.cstruct import Layout
from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys, release
from pyxdp.kernel.privileges import require_bpf_admin
from pyxdp.proto import counters, frames
from pyxdp.relay import schema
from pyxdp.relay import sockets as relay_sockets
from pyxdp.relay.schema import FIELDS, LAYOUT
from pyxdp.xdp import compiler

RELAY_SOURCE = "sk_relay.bpf.c"
PARSER = "zl_sk_parser"
VERDICT = "zl_sk_verdict"
# The bench's ceiling (bpf/sk_relay.bpf.c): a verdict alone, no parser, no framing.
UNFRAMED_VERDICT = "zl_sk_verdict_unframed"
# What is attached to the sockhash, in load order.
FRAMED_PROGRAMS = ((PARSER, bpfsys.BPF_SK_SKB_STREAM_PARSER),
                   (VERDICT, bpfsys.BPF_SK_SKB_STREAM_VERDICT))
UNFRAMED_PROGRAMS = ((UNFRAMED_VERDICT, bpfsys.BPF_SK_SKB_STREAM_VERDICT),)
RELAY_MAPS = {"counters": "zl_sk_counters", "config": "zl_sk_config", "conns": "zl_sk_conns"}

# bpf/zl_sk_structs.h (struct zl_sk_counters is schema.LAYOUT): change both together.
CONFIG = Layout("zl_sk_config", ("max_length", "I"), ("reserved", "I"))
CONN = Layout(
    "zl_sk_conn",
    ("peer", "Q"),
    ("frame_bytes", "Q"),
    ("msg_types", "Q"),
    ("first_seq", "I"),
    ("next_seq", "I"),
    ("seen_end", "I"),
    ("msg_off", "I"),
    ("msg_len", "I"),
    ("broken", "I"),
    ("started", "B"),
    ("in_msg", "B"),
    ("pad", "6x"),
)
KEY = struct.Struct("=I")
# Bytes the parser copies from the skb at a time to read frame headers that
# are not in its linear data (bpf/zl_stream.h); 0 reads each header with its
# own helper call, for verifiers that refuse reads at a variable offset into
# the stack (Linux before 5.12).
HEADER_WINDOWS = (16384, 0)
# SO_RCVLOWAT that keeps TCP from waking a socket's reader (the kernel caps
# it at half the receive buffer).
_GATE_SHUT = 0x7FFFFFFF
# A frame's whole length must fit the parser's int return.
MAX_LENGTH_LIMIT = 0x7FFFFFFF - frames.HEADER_LEN
COOKIE = relay_sockets.COOKIE
# Before this release the kernel sends a redirected message from the start of
# the skb it came in, not from where the stream parser said it starts
# (fixed by "skmsg: lose offset info in sk_psock_skb_ingress", 2021): a
# message that begins part-way into a TCP segment arrives with the bytes
# around it. Measured on Debian 11's 5.10, where the self-check refuses; the
# self-check decides, this only names the cause in its message.
OFFSETS_KEPT_SINCE = (5, 15)


@dataclass(frozen=True)
class ConnState:
    """struct zl_sk_conn: one relayed socket's pairing and framing state."""

    peer: int
    frame_bytes: int
    msg_types: int
    first_seq: int
    next_seq: int
    seen_end: int
    msg_off: int
    msg_len: int  # 0 while the current message's first header is incomplete
    broken: int   # why the parser broke the stream: schema.REASONS index + 1; 0 while whole
    started: bool
    in_msg: bool

    @classmethod
    def unpack(cls, raw: bytes) -> "ConnState":
        v = dict(zip(CONN.value_names(), CONN.unpack(raw)))
        return cls(**{**v, "started": bool(v["started"]), "in_msg": bool(v["in_msg"])})


class RelayDataPath:
    """The loaded programs and maps of one relay. Pair sockets with pair(),
    undo with unpair(); close() when done.

    framing=False loads UNFRAMED_PROGRAMS instead of the parser and verdict:
    segments are relayed as they come, nothing is judged or counted. Only
    the bench uses it, to measure what sockmap itself costs (§8)."""

    def __init__(self, *, max_socks: int = 4096, max_length: int = frames.DEFAULT_MAX_LENGTH,
                 framing: bool = True):
        require_bpf_admin("zerolayer relay")
        self.socks_fd = bpfsys.map_create(bpfsys.BPF_MAP_TYPE_SOCKHASH, COOKIE.size, COOKIE.size,
                                          max_socks, "zl_sk_socks")
        self._attached: list[tuple[int, int]] = []
        self._loaded = None
        try:
            programs = FRAMED_PROGRAMS if framing else UNFRAMED_PROGRAMS
            self._loaded, self.header_window = _load(programs, self.socks_fd, max_socks)
            self._maps = self._loaded.map_fds
            self.set_max_length(max_length)
            for prog, attach_type in programs:
                fd = self._loaded.prog_fds[prog]
                try:
                    bpfsys.prog_attach(self.socks_fd, fd, attach_type)
                except OSError as exc:
                    raise ZerolayerError(
                        f"this kernel ({platform.release()}) refused to attach the relay's "
                        f"{prog} to its sockhash ({errno.errorcode.get(exc.errno or 0, exc.errno)}: "
                        f"{exc.strerror}): use --engine asyncio") from None
                self._attached.append((fd, attach_type))
        except BaseException:
            self.close()
            raise

    # --- pairing ------------------------------------------------------------------

    def pair(self, a: socket.socket, b: socket.socket) -> tuple[int, int]:
        """Relay A's frames to B and B's to A, in the kernel. Returns their
        cookies. Both must be connected TCP sockets nobody reads from.

        Raises OSError, with nothing paired, when the kernel refuses a
        socket: it takes only established ones, so not one whose peer
        already sent its FIN (EOPNOTSUPP)."""
        ca, cb = relay_sockets.cookie(a), relay_sockets.cookie(b)
        # The stream parser runs from a socket's data-ready callback, which
        # TCP calls only once SO_RCVLOWAT bytes are in (or a FIN). Hold both
        # gates shut while the pair is made, so that neither parser passes a
        # frame on before its peer has joined (the frame would be dropped),
        # then open them: setting SO_RCVLOWAT calls the callback, which
        # parses whatever came before.
        for sock in (a, b):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, _GATE_SHUT)
        try:
            # The parser refuses sockets without state: PEER, the rest zero.
            for me, peer in ((ca, cb), (cb, ca)):
                bpfsys.map_update(self._maps["conns"], COOKIE.pack(me),
                                  COOKIE.pack(peer).ljust(CONN.size, b"\0"))
            for sock, key in ((a, ca), (b, cb)):
                bpfsys.map_update(self.socks_fd, COOKIE.pack(key), COOKIE.pack(sock.fileno()))
        except OSError:
            self.unpair(ca, cb)
            raise
        finally:
            for sock in (a, b):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
        return ca, cb

    def unpair(self, *cookies: int) -> None:
        """Take the sockets out of the sockhash, and forget their state.
        Frames the kernel still had queued for them are dropped: drain first."""
        for c in cookies:
            bpfsys.map_delete(self.socks_fd, COOKIE.pack(c))
            bpfsys.map_delete(self._maps["conns"], COOKIE.pack(c))

    def conn(self, cookie: int) -> ConnState | None:
        raw = bpfsys.map_lookup(self._maps["conns"], COOKIE.pack(cookie), CONN.size)
        return ConnState.unpack(raw) if raw is not None else None

    def sockets(self) -> list[int]:
        """Cookies in the sockhash (a closed socket leaves it by itself)."""
        return [COOKIE.unpack(k)[0] for k in bpfsys.map_keys(self.socks_fd, COOKIE.size)]

    def conns(self) -> list[int]:
        return [COOKIE.unpack(k)[0] for k in bpfsys.map_keys(self._maps["conns"], COOKIE.size)]

    # --- configuration and counters ---------------------------------------------------

    def set_max_length(self, max_length: int) -> None:
        """A frame announcing a longer payload breaks its stream; takes effect
        on the next frame header parsed."""
        if not 0 <= max_length <= MAX_LENGTH_LIMIT:
            raise ZerolayerError(
                f"maximum frame length {max_length} is out of range: 0-{MAX_LENGTH_LIMIT}")
        bpfsys.map_update(self._maps["config"], KEY.pack(0), CONFIG.pack(max_length, 0))

    def max_length(self) -> int:
        return CONFIG.unpack(self._element("config", CONFIG.size))[0]

    def read_counters(self) -> dict[str, int]:
        ncpus = bpfsys.possible_cpus()
        raw = self._element("counters", LAYOUT.size * ncpus)
        return counters.from_percpu(raw, ncpus, FIELDS)

    def program_stats(self) -> dict[str, tuple[int, int]]:
        """Per program, (run_time_ns, run_cnt) since it was loaded: counted
        only while BPF run-time statistics are on (bpfsys.run_stats_on)."""
        assert self._loaded is not None, "the data path is closed"
        return {name: bpfsys.prog_run_stats(fd) for name, fd in self._loaded.prog_fds.items()}

    def _element(self, name: str, size: int) -> bytes:
        raw = bpfsys.map_lookup(self._maps[name], KEY.pack(0), size)
        assert raw is not None  # an array map has every index
        return raw

    # --- start-up check and teardown -------------------------------------------------

    def self_check(self) -> None:
        """Relay a few frames between two loopback connections, cut so that
        one frame starts part-way into a TCP segment and another's header is
        split: the case that depends on how this kernel's stream parser
        presents data (bpf/zl_stream.h). Refuse to go on if it fails."""
        first = frames.encode(frames.FrameType.TOKEN, "zero")
        stream = (first + frames.encode(frames.FrameType.TOKEN, "layer")
                  + frames.encode(frames.FrameType.DONE))
        cut = len(first) + 2
        socks: list[socket.socket] = []
        try:
            try:
                ends = _loopback_pairs(socks)
            except OSError as exc:
                raise ZerolayerError(
                    f"the relay's start-up check needs loopback (127.0.0.1) up: {exc.strerror}"
                ) from None
            client, relay_in, relay_out, server = ends
            cookies = self.pair(relay_in, relay_out)
            try:
                client.sendall(stream[:cut])
                time.sleep(0.01)  # two segments
                client.sendall(stream[cut:])
                got = _read(server, len(stream), timeout=2.0)
            finally:
                self.unpair(*cookies)
        finally:
            for s in socks:
                s.close()
        if got == stream:
            return
        intact = next((i for i, (a, b) in enumerate(zip(got, stream)) if a != b), len(got))
        seen = f"sent {len(stream)} bytes, {len(got)} arrived, the first {intact} intact"
        if not release.at_least(*OFFSETS_KEPT_SINCE):
            raise ZerolayerError(
                f"this kernel ({platform.release()}) sends a relayed message from the start of "
                f"its TCP segment, not where the stream parser cut it ({seen}; fixed in Linux "
                "5.15): the in-kernel relay would duplicate bytes here; use --engine asyncio")
        raise ZerolayerError(
            "this kernel's stream parser does not present TCP data as zerolayer's parser "
            f"expects ({seen}): the in-kernel relay cannot frame safely here; "
            "use --engine asyncio")

    def close(self) -> None:
        for fd, attach_type in self._attached:
            try:
                bpfsys.prog_detach(self.socks_fd, fd, attach_type)
            except OSError:
                pass  # the map is going away with its attachments anyway
        self._attached = []
        if self.socks_fd >= 0:
            os.close(self.socks_fd)
            self.socks_fd = -1
        if self._loaded is not None:
            self._loaded.close()  # the programs' and maps' fds
            self._loaded = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# One object per header window: the verifier, not a run, picks among them.
RELAY_BUILDS = {window: compiler.shipped(RELAY_SOURCE, (*compiler.define_flags(schema.c_defines()),
                                                        f"-DZL_SK_WINDOW={window}"),
                                     variant=f"window {window}")
                for window in HEADER_WINDOWS}


def _load(programs, socks_fd: int, max_socks: int) -> tuple[compiler.Loaded, int]:
    """The relay's programs, with the widest header window this kernel's
    verifier accepts, and that window."""
    *wider, narrowest = HEADER_WINDOWS
    for window in wider:
        try:
            return _compile(programs, socks_fd, max_socks, window), window
        except ZerolayerError:
            pass  # this verifier refuses it: the next is narrower
    return _compile(programs, socks_fd, max_socks, narrowest), narrowest


def _compile(programs, socks_fd: int, max_socks: int, window: int) -> compiler.Loaded:
    return compiler.load(
        RELAY_BUILDS[window], programs[0][0], also=tuple(name for name, _ in programs[1:]),
        maps=RELAY_MAPS, reuse={"zl_sk_socks": socks_fd}, sizes={"zl_sk_conns": max_socks},
    )


def _loopback_pairs(socks: list) -> tuple:
    """client -> relay_in (accepted) and relay_out -> server (accepted)."""
    listeners = []
    for _ in range(2):
        lst = socket.socket()
        socks.append(lst)
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        listeners.append(lst)
    client = socket.create_connection(listeners[0].getsockname(), timeout=2)
    socks.append(client)
    relay_in, _ = listeners[0].accept()
    socks.append(relay_in)
    relay_out = socket.create_connection(listeners[1].getsockname(), timeout=2)
    socks.append(relay_out)
    server, _ = listeners[1].accept()
    socks.append(server)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, relay_in, relay_out, server


def _read(sock: socket.socket, n: int, timeout: float) -> bytes:
    sock.settimeout(timeout)
    out = b""
    try:
        while len(out) < n:
            data = sock.recv(n - len(out))
            if not data:
                break
            out += data
    except socket.timeout:
        pass
    return out
