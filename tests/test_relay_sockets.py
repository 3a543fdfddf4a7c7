# SPDX-License-Identifier: Apache-2.0
"""The TCP frame relay against real sockets on loopback: the in-kernel relay
(sockmap + stream parser) and the asyncio reference relay, held to the same
rules. The test is both ends: the client, and the upstream server (a
listener it accepts from), so it can put any bytes on either side and see
exactly what comes out of the other.

After every case: nothing partial or merged was delivered (the bytes out
decode to exactly the whole frames in), the offending stream was closed and
its reason counted, and no map entry or fd is left behind.
"""

import os
import platform
import shutil
import socket
import struct
import time

import pytest

from pyxdp.bpf import SOURCE_DIR
from pyxdp.errors import ZerolayerError
from pyxdp.kernel import release
from pyxdp.proto import counters, frames
from pyxdp.proto.frames import FrameType, StreamDecoder, encode
from pyxdp.relay import datapath as datapath_module
from pyxdp.relay import sockets as relay_sockets
from pyxdp.relay.asyncio_relay import AsyncioRelay
from pyxdp.relay.datapath import HEADER_WINDOWS, RelayDataPath
from pyxdp.relay.schema import FIELDS
from pyxdp.relay.sockmap_relay import Relay, serve_in_thread
from pyxdp.relay.tokens import TokenServer, answer, request_payload

pytestmark = pytest.mark.root

ENGINES = ["sockmap", "asyncio"]
# The sockmap relay is the kernel's part: every test of it is in the kernel suite.
KERNEL_RELAY = [pytest.mark.kernel, pytest.mark.capability("relay")]
PAUSE = 0.003  # between sends that must land in separate TCP segments


# Before 5.15 the kernel sends a message from its segment's start: the
# self-check must refuse there, and nothing else of the sockmap relay runs.
OFFSETS_KEPT = release.at_least(*datapath_module.OFFSETS_KEPT_SINCE)
NO_SOCKMAP_RELAY = (f"this kernel ({platform.release()}) relays a message from its segment's "
                    "start: the sockmap relay refuses (test_the_relay_refuses_in_one_line_"
                    "where_the_kernel_loses_offsets)")


@pytest.fixture(scope="module")
def datapath():
    """The kernel side, compiled once for the module; each test gets its own
    relay on it."""
    with RelayDataPath(max_socks=4096) as dp:
        if not OFFSETS_KEPT:
            with pytest.raises(ZerolayerError, match="from the start of its TCP segment"):
                dp.self_check()
            pytest.skip(NO_SOCKMAP_RELAY)
        dp.self_check()
        yield dp


@pytest.mark.smoke
@pytest.mark.kernel
@pytest.mark.capability("relay")
def test_the_relay_refuses_in_one_line_where_the_kernel_loses_offsets(cli, record_property):
    if OFFSETS_KEPT:
        pytest.skip("this kernel keeps the stream parser's offsets: the relay runs")
    proc = cli("relay", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9")
    assert proc.returncode == 1, proc
    [line] = proc.stderr.splitlines()
    assert "sends a relayed message from the start of its TCP segment" in line
    assert line.endswith("use --engine asyncio") and "internal error" not in line
    record_property("seen", "refused in one line: before 5.15 the kernel relays a message "
                            "from its segment's start (--engine asyncio instead)")


def open_fds() -> set[tuple[str, str]]:
    """This process's fds and what each is (socket:[inode] and the like)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
        except FileNotFoundError:
            pass  # the one listdir itself used
    return out


class Harness:
    """A relay of ENGINE from the test (client) to UPSTREAM, by default a
    listener the test accepts from."""

    def __init__(self, engine: str, datapath, *, upstream: str | None = None,
                 max_length: int = frames.DEFAULT_MAX_LENGTH, **sockmap_options):
        self.engine = engine
        self.datapath = datapath
        self.listener = None
        if upstream is None:
            self.listener = relay_sockets.listener("127.0.0.1:0")
            self.listener.settimeout(5)
            upstream = relay_sockets.format_address(self.listener.getsockname())
        if engine == "sockmap":
            self.relay = Relay("127.0.0.1:0", upstream, datapath=datapath,
                               max_length=max_length, **sockmap_options)
            self.thread = serve_in_thread(self.relay)
        else:
            self.relay = AsyncioRelay("127.0.0.1:0", upstream, max_length=max_length).start()
        self.fds = open_fds()
        self.kernel_before = datapath.read_counters()

    def connect(self) -> tuple[socket.socket, socket.socket]:
        """(client end, upstream end) of one relayed connection."""
        client = relay_sockets.connect(self.relay.address)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream, _ = self.listener.accept()
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return client, upstream

    def stats(self) -> dict:
        return self.relay.stats()

    def settle(self, closed: int, timeout: float = 10.0) -> dict:
        """Wait until CLOSED pairs have been torn down and none is left."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            if stats["pairs"]["closed"] >= closed and stats["pairs"]["active"] == 0:
                return stats
            if time.monotonic() > deadline:
                raise AssertionError(f"relay did not settle: {stats}")
            time.sleep(0.01)

    def check_no_leaks(self) -> None:
        # asyncio closes a transport on its loop's next turn: give it time
        deadline = time.monotonic() + 5
        while open_fds() - self.fds and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not open_fds() - self.fds, "the relay leaked file descriptors"
        if self.engine == "sockmap":
            assert self.datapath.sockets() == [], "sockets left in the sockhash"
            assert self.datapath.conns() == [], "pair state left in zl_sk_conns"

    def kernel_delta(self) -> dict:
        return counters.delta(self.datapath.read_counters(), self.kernel_before, FIELDS)

    def stop(self) -> None:
        self.relay.stop()
        if self.engine == "sockmap":
            self.thread.join(10)
            self.relay.close()
        if self.listener is not None:
            self.listener.close()


@pytest.fixture(params=[pytest.param("sockmap", marks=KERNEL_RELAY), "asyncio"])
def harness(request, datapath):
    made = []

    def make(**kwargs) -> Harness:
        h = Harness(request.param, datapath, **kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        h.stop()


def recv_exactly(sock: socket.socket, n: int, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    out = b""
    while len(out) < n:
        data = sock.recv(n - len(out))
        if not data:
            break
        out += data
    return out


def recv_to_end(sock: socket.socket, timeout: float = 5.0) -> tuple[bytes, str]:
    """Everything until the stream ends, and how: "eof" or "reset"."""
    sock.settimeout(timeout)
    out = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return out, "reset"
        if not data:
            return out, "eof"
        out += data


def whole_frames(data: bytes) -> list[frames.Frame]:
    """DATA must be whole frames and nothing else."""
    decoder = StreamDecoder()
    out = decoder.feed(data)
    assert decoder.at_boundary, f"{decoder.pending} bytes of a partial frame were delivered"
    return out


def sample_frames() -> bytes:
    return (encode(FrameType.REQUEST, request_payload("split me")) + encode(FrameType.TOKEN, "a")
            + encode(FrameType.PING) + encode(FrameType.TOKEN, "x" * 300) + encode(FrameType.DONE))


def counted(h: Harness) -> dict:
    """Frames counted by the relay: by the kernel, or by the asyncio relay."""
    if h.engine == "sockmap":
        return h.kernel_delta()
    return counters.flatten(h.stats()["counters"], FIELDS)


# --- framing ------------------------------------------------------------------------------

@pytest.mark.parametrize("direction", ["up", "down"])
def test_frames_split_at_every_byte_offset(harness, direction):
    h = harness()
    client, upstream = h.connect()
    src, dst = (client, upstream) if direction == "up" else (upstream, client)
    stream = sample_frames()
    for cut in range(len(stream) + 1):
        src.sendall(stream[:cut])
        time.sleep(PAUSE)
        src.sendall(stream[cut:])
        got = recv_exactly(dst, len(stream))
        assert got == stream, f"split at byte {cut}: relayed bytes differ"
    src.close()
    assert recv_to_end(dst) == (b"", "eof")
    dst.close()
    stats = h.settle(closed=1)
    assert stats["closed"]["eof"] == 1
    rounds = len(stream) + 1
    c = counted(h)
    assert c["frames.token"] == 2 * rounds and c["frames.done"] == rounds
    assert c["redirected"] == 5 * rounds
    h.check_no_leaks()


@pytest.mark.smoke
def test_many_frames_in_one_segment(harness):
    h = harness()
    client, upstream = h.connect()
    batch = b"".join(encode(FrameType.TOKEN, struct.pack("!Q", i)) for i in range(1000))
    assert len(batch) < 65000  # one loopback segment
    upstream.sendall(batch)
    got = whole_frames(recv_exactly(client, len(batch)))
    assert [struct.unpack("!Q", f.payload)[0] for f in got] == list(range(1000))
    assert counted(h)["frames.token"] == 1000
    client.close()
    upstream.close()
    h.settle(closed=1)
    h.check_no_leaks()


def test_a_long_run_of_every_type_is_counted_by_type(harness):
    # More frames in one segment than a byte per type could count (the
    # parser's message holds up to ZL_SK_BATCH of them).
    types = list(FrameType)
    run = [types[i % len(types)] for i in range(1500)]
    batch = b"".join(encode(t, struct.pack("!H", i)) for i, t in enumerate(run))
    assert len(batch) < 65000  # one loopback segment
    h = harness()
    client, upstream = h.connect()
    upstream.sendall(batch)
    got = whole_frames(recv_exactly(client, len(batch)))
    assert [(f.type, struct.unpack("!H", f.payload)[0]) for f in got] == list(zip(run, range(1500)))
    c = counted(h)
    assert [c[f"frames.{t.name.lower()}"] for t in types] == [run.count(t) for t in types]
    client.close()
    upstream.close()
    h.settle(closed=1)
    h.check_no_leaks()


def test_frames_longer_than_a_segment_among_short_ones(harness):
    # Frame headers past what the parser makes linear, and messages that
    # start deep into what the stream parser gathered.
    payloads = [b"a" * 100_000] + [struct.pack("!H", i) for i in range(300)] + [b"b" * 70_000]
    stream = b"".join(encode(FrameType.TOKEN, p) for p in payloads) + encode(FrameType.DONE)
    h = harness()
    client, upstream = h.connect()
    upstream.sendall(stream)
    got = whole_frames(recv_exactly(client, len(stream)))
    assert [f.payload for f in got] == [*payloads, b""]
    assert counted(h)["frames.token"] == len(payloads)
    client.close()
    upstream.close()
    h.settle(closed=1)
    h.check_no_leaks()


def test_header_split_one_and_four(harness):
    h = harness()
    client, upstream = h.connect()
    frame = encode(FrameType.TOKEN, "split header")
    for part in (frame[:1], frame[1:5], frame[5:]):
        upstream.sendall(part)
        time.sleep(PAUSE)
    assert whole_frames(recv_exactly(client, len(frame))) == [frames.Frame(FrameType.TOKEN, b"split header")]
    client.close()
    upstream.close()
    h.settle(closed=1)
    h.check_no_leaks()


# --- broken streams ---------------------------------------------------------------------------

BAD_HEADERS = {
    "oversize": struct.pack("!IB", frames.DEFAULT_MAX_LENGTH + 1, FrameType.TOKEN),
    "unknown_type": struct.pack("!IB", 3, 9),
}


@pytest.mark.parametrize("reason", sorted(BAD_HEADERS))
@pytest.mark.parametrize("offender", ["client", "upstream"])
def test_broken_stream_is_closed_and_counted(harness, reason, offender):
    h = harness()
    client, upstream = h.connect()
    bad, good = (client, upstream) if offender == "client" else (upstream, client)
    before = encode(FrameType.TOKEN, "whole") + encode(FrameType.PING)
    bad.sendall(before + BAD_HEADERS[reason] + b"abc" + encode(FrameType.TOKEN, "after"))
    # the innocent side gets the whole frames before the bad header, then EOF
    got, how = recv_to_end(good)
    assert (got, how) == (before, "eof")
    # the offender's connection is reset
    assert recv_to_end(bad)[1] == "reset"
    for s in (client, upstream):
        s.close()
    stats = h.settle(closed=1)
    assert stats["closed"][reason] == 1
    assert counted(h)[f"malformed.{reason}"] == 1
    h.check_no_leaks()


@pytest.mark.parametrize("reason", sorted(BAD_HEADERS))
@pytest.mark.parametrize("count", [700, 1500])
def test_a_bad_header_deep_in_a_long_run(harness, reason, count):
    # The parser walks many frames per call: the whole ones before the bad
    # header still go through, in the same segment as it. 1,500 frames put
    # the bad header past the parser's window (bpf/zl_stream.h).
    before = b"".join(encode(FrameType.TOKEN, struct.pack("!Q", i)) for i in range(count))
    h = harness()
    client, upstream = h.connect()
    upstream.sendall(before + BAD_HEADERS[reason] + b"abc" + encode(FrameType.TOKEN, "after"))
    assert recv_to_end(client) == (before, "eof")
    assert recv_to_end(upstream)[1] == "reset"
    for s in (client, upstream):
        s.close()
    assert h.settle(closed=1)["closed"][reason] == 1
    c = counted(h)
    assert c["frames.token"] == count and c[f"malformed.{reason}"] == 1
    h.check_no_leaks()


def test_max_length_changes_at_run_time(harness):
    h = harness(max_length=16)
    client, upstream = h.connect()
    ok = encode(FrameType.TOKEN, "x" * 16)
    upstream.sendall(ok + encode(FrameType.TOKEN, "y" * 17))
    assert recv_to_end(client) == (ok, "eof")
    client.close()
    upstream.close()
    assert h.settle(closed=1)["closed"]["oversize"] == 1
    if h.engine == "sockmap":  # the same relay, a new limit, no restart
        h.relay.set_max_length(17)
        assert h.stats()["max_length"] == 17
        client, upstream = h.connect()
        upstream.sendall(encode(FrameType.TOKEN, "y" * 17))
        assert recv_exactly(client, 22) == encode(FrameType.TOKEN, "y" * 17)
        client.close()
        upstream.close()
        h.settle(closed=2)
    h.check_no_leaks()


@pytest.mark.parametrize("how", ["short_header", "truncated", "reset"])
def test_peer_vanishes_mid_frame(harness, how):
    h = harness()
    client, upstream = h.connect()
    whole = encode(FrameType.TOKEN, "kept") + encode(FrameType.TOKEN, "also kept")
    partial = encode(FrameType.TOKEN, "never delivered")
    partial = partial[:3] if how == "short_header" else partial[:9]
    upstream.sendall(whole + partial)
    time.sleep(PAUSE)
    if how == "reset":
        relay_sockets.reset_on_close(upstream)
    upstream.close()
    got, end = recv_to_end(client)
    assert got == whole and end == "eof"
    client.close()
    assert h.settle(closed=1)["closed"][how] == 1
    h.check_no_leaks()


# --- lifecycle ---------------------------------------------------------------------------------

def test_a_thousand_connections_opened_and_closed(harness):
    with TokenServer("127.0.0.1:0") as server:
        h = harness(upstream=server.address)
        pong = encode(FrameType.PONG)
        for _ in range(10):
            socks = [relay_sockets.connect(h.relay.address) for _ in range(100)]
            for s in socks:
                s.sendall(encode(FrameType.PING))
            for s in socks:
                assert recv_exactly(s, len(pong)) == pong
                s.close()
        stats = h.settle(closed=1000, timeout=30)
        assert stats["pairs"]["accepted"] == 1000
        assert stats["closed"]["eof"] == 1000
        assert server.stats.connections == 1000
        h.check_no_leaks()


def test_everything_relayed_reaches_a_slow_reader_before_eof(harness):
    """The upstream sends much more than the socket buffers hold and closes
    at once; the client only starts reading later. Teardown must wait for
    the kernel's queue to drain, not drop it."""
    h = harness()
    client, upstream = h.connect()
    frame_list = [encode(FrameType.TOKEN, f"{i:08d}" + "z" * 92) for i in range(20000)]
    data = b"".join(frame_list)
    upstream.sendall(data)
    upstream.close()
    time.sleep(0.5)
    got, how = recv_to_end(client, timeout=10)
    assert how == "eof" and got == data
    client.close()
    assert h.settle(closed=1)["closed"]["eof"] == 1
    h.check_no_leaks()


def test_half_closed_client_still_gets_its_answer(harness):
    with TokenServer("127.0.0.1:0") as server:
        h = harness(upstream=server.address)
        client = relay_sockets.connect(h.relay.address)
        request = request_payload("one two three", max_tokens=7)
        client.sendall(encode(FrameType.REQUEST, request))
        client.shutdown(socket.SHUT_WR)
        got, how = recv_to_end(client)
        received = whole_frames(got)
        assert how == "eof"
        assert [f.payload.decode() for f in received[:-1]] == answer(request)
        assert received[-1].type is FrameType.DONE
        client.close()
        assert h.settle(closed=1)["closed"]["eof"] == 1
        h.check_no_leaks()


def test_client_that_half_closes_before_the_upstream_answers(harness):
    """The kernel takes only established sockets into a sockhash; a client
    whose FIN is in before its pair is made is relayed in userspace, by the
    same rules, and counted. The upstream's accept queue is kept full so
    that the relay's connect waits for a SYN retransmission."""
    h = harness()
    h.listener.close()
    upstream_addr = h.relay.upstream
    _, sockaddr = relay_sockets.parse_address(upstream_addr)
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(sockaddr)
    lst.listen(0)
    h.listener = lst
    h.fds = open_fds()  # the test's new listener is not the relay's
    filler = relay_sockets.connect(upstream_addr)  # fills the accept queue
    client = relay_sockets.connect(h.relay.address)
    request = encode(FrameType.REQUEST, request_payload("early bird"))
    client.sendall(request)
    client.shutdown(socket.SHUT_WR)
    time.sleep(0.2)  # the FIN is in; the relay still waits for its upstream
    lst.settimeout(10)
    lst.accept()[0].close()  # the filler's
    upstream, _ = lst.accept()  # the relay's, after its SYN is retried
    assert recv_to_end(upstream) == (request, "eof")
    answer_frames = encode(FrameType.TOKEN, "early") + encode(FrameType.DONE)
    upstream.sendall(answer_frames)
    upstream.close()
    assert recv_to_end(client) == (answer_frames, "eof")
    client.close()
    filler.close()
    stats = h.settle(closed=1)
    assert stats["closed"]["eof"] == 1 and stats["pairs"]["userspace"] == 1
    h.check_no_leaks()


def test_unreachable_upstream_is_counted(harness):
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    closed_port = relay_sockets.format_address(spare.getsockname())
    spare.close()  # nothing listens there now
    h = harness(upstream=closed_port)
    client = relay_sockets.connect(h.relay.address)
    assert recv_to_end(client)[0] == b""
    client.close()
    deadline = time.monotonic() + 5
    while h.stats()["pairs"]["upstream_unreachable"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    h.settle(closed=0)
    h.check_no_leaks()


def test_stats_have_one_shape_for_both_engines(datapath):
    shapes = []
    for engine in ENGINES:
        h = Harness(engine, datapath)
        try:
            stats = h.stats()
        finally:
            h.stop()
        shapes.append({k: sorted(v) if isinstance(v, dict) else None for k, v in stats.items()})
        assert stats["engine"] == engine
    assert shapes[0] == shapes[1]


@pytest.mark.kernel
@pytest.mark.capability("relay")
def test_the_parser_reads_headers_through_its_window_where_the_kernel_allows(datapath):
    """The per-header fallback is for kernels without BPF's atomic exchange
    (before 5.12): anywhere newer, a parser that fell back would be a
    regression hidden by the fallback."""
    if not release.at_least(5, 12):
        assert datapath.header_window == 0
    else:
        assert datapath.header_window == HEADER_WINDOWS[0]
    # test_a_bad_header_deep_in_a_long_run reaches past it
    assert HEADER_WINDOWS[0] < 1500 * len(encode(FrameType.TOKEN, struct.pack("!Q", 0)))


@pytest.mark.kernel
@pytest.mark.capability("relay")
def test_the_per_header_parser_of_older_kernels_frames_exactly(monkeypatch):
    """The parser built without a window (what kernels before 5.12 load),
    on the cases that cross and break runs of frames."""
    if not OFFSETS_KEPT:
        pytest.skip(NO_SOCKMAP_RELAY)
    monkeypatch.setattr(datapath_module, "HEADER_WINDOWS", (0,))
    with RelayDataPath(max_socks=16) as dp:
        assert dp.header_window == 0
        dp.self_check()
        h = Harness("sockmap", dp)
        try:
            client, upstream = h.connect()
            payloads = [struct.pack("!H", i) for i in range(1200)] + [b"a" * 70_000, b"z"]
            stream = b"".join(encode(FrameType.TOKEN, p) for p in payloads)
            upstream.sendall(stream + BAD_HEADERS["unknown_type"])
            assert [f.payload for f in whole_frames(recv_to_end(client)[0])] == payloads
            assert recv_to_end(upstream)[1] == "reset"
            client.close()
            upstream.close()
            assert h.settle(closed=1)["closed"]["unknown_type"] == 1
            c = counted(h)
            assert c["frames.token"] == len(payloads) and c["malformed.unknown_type"] == 1
            h.check_no_leaks()
        finally:
            h.stop()


@pytest.mark.kernel
@pytest.mark.capability("relay")
def test_a_reader_too_slow_for_its_backlog_is_cut_off(datapath):
    """The kernel's queue between two sockets of a sockhash has no bound:
    the relay closes a pair whose reader lets more than max_backlog pile up.
    (The asyncio relay has TCP's backpressure instead.)"""
    h = Harness("sockmap", datapath, max_backlog=1 << 20)
    try:
        client, upstream = h.connect()
        flood = encode(FrameType.TOKEN, "t" * 1000) * 30000  # 30 MB the client never reads
        try:
            upstream.sendall(flood)
        except (BrokenPipeError, ConnectionResetError):
            pass  # a slow machine: the pair was cut while the flood was still being written
        stats = h.settle(closed=1)
        assert stats["closed"]["slow_reader"] == 1
        # Closed with a FIN, or with a reset when the cut came mid-flood and
        # unread bytes were still queued on the relay's side.
        assert recv_to_end(upstream)[0] == b""
        got, how = recv_to_end(client)
        assert how == "reset" and len(got) < len(flood)
        for s in (client, upstream):
            s.close()
        h.check_no_leaks()
    finally:
        h.stop()


@pytest.mark.kernel
@pytest.mark.capability("relay")
def test_start_up_check_refuses_a_parser_that_misplaces_frames(tmp_path, monkeypatch):
    """The parser finds each message in the skb from TCP sequence numbers,
    through the kernel's internal layout; the relay checks that at start-up.
    A parser that takes every message to start at the skb's first byte (as
    one would on a kernel laid out otherwise) must be refused there."""
    src = tmp_path / "bpf"
    shutil.copytree(SOURCE_DIR, src, ignore=shutil.ignore_patterns("__pycache__"))
    header = src / "zl_stream.h"
    text = header.read_text()
    assert "__u32 seg_seq = skb->cb[0];" in text
    header.write_text(text.replace("__u32 seg_seq = skb->cb[0];", "__u32 seg_seq = c->next_seq;"))
    monkeypatch.setenv("ZEROLAYER_BPF_DIR", str(src))
    with RelayDataPath(max_socks=16) as dp:
        with pytest.raises(ZerolayerError, match="use --engine asyncio$"):
            dp.self_check()
        assert dp.sockets() == [] and dp.conns() == []


@pytest.mark.kernel
@pytest.mark.capability("relay")
def test_a_relay_frees_everything_it_made():
    """Programs, maps, sockets, threads: a relay that loaded its own data
    path and is closed leaves nothing open in the process; one refused at
    start (before 5.15) leaves nothing either."""
    before = open_fds()
    if not OFFSETS_KEPT:
        with pytest.raises(ZerolayerError, match="use --engine asyncio$"):
            Relay("127.0.0.1:0", "127.0.0.1:1")
        assert not open_fds() - before
        return
    relay = Relay("127.0.0.1:0", "127.0.0.1:1")
    thread = serve_in_thread(relay)
    client = relay_sockets.connect(relay.address)
    assert recv_to_end(client)[0] == b""  # nothing listens upstream
    client.close()
    relay.stop()
    thread.join(10)
    relay.close()
    assert not thread.is_alive()
    assert not open_fds() - before


@pytest.mark.kernel
@pytest.mark.capability("relay")
def test_clients_beyond_max_pairs_are_refused(datapath):
    h = Harness("sockmap", datapath, max_pairs=1)
    try:
        client, upstream = h.connect()
        extra = relay_sockets.connect(h.relay.address)
        assert recv_to_end(extra)[0] == b""  # closed at once, never relayed
        extra.close()
        upstream.sendall(encode(FrameType.TOKEN, "still relayed"))
        assert recv_exactly(client, 18) == encode(FrameType.TOKEN, "still relayed")
        client.close()
        upstream.close()
        stats = h.settle(closed=1)
        assert stats["pairs"]["refused"] == 1 and stats["pairs"]["accepted"] == 2
        h.check_no_leaks()
    finally:
        h.stop()
