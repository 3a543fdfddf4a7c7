# SPDX-License-Identifier: Apache-2.0
"""pyxdp.streams.http2 and the tracker's HTTP/2 streams, fed real frames:
a client and a server of the python-hyper project's `h2` talk to each
other in memory, and the bytes each wrote are what the tracker is given
(as the client's process would be seen, or the server's). Frames h2 will
not write (a padded or continued header block, HPACK referring to entries
never sent) are built with hpack's Encoder, only their 9-byte frame
headers by hand (RFC 9113 §4.1)."""

import json
import random
import struct

import h2.config
import h2.connection
import h2.errors
import pytest
from hpack import Encoder
from hypothesis import given, settings
from hypothesis import strategies as st

from pyxdp.streams import http2
from pyxdp.streams.tracker import StreamTracker

MS = 1_000_000
CONN = (7, 3)


def chunk(text: str) -> bytes:
    return b"data: " + json.dumps({"model": "m-h2", "choices": [
        {"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
REQUEST_BODY = b'{"model": "m-h2", "stream": true, "messages": [{"content": "zl-secret"}]}'


def request_headers(path: str = "/v1/chat/completions", content_type: str = "application/json"):
    return [(":method", "POST"), (":path", path), (":scheme", "https"),
            (":authority", "127.0.0.1"), ("content-type", content_type)]


SSE_HEAD = [(":status", "200"), ("content-type", "text/event-stream")]


class Pair:
    """An h2 client and server joined in memory; WIRE is what each wrote,
    in order: (True: the client wrote it, bytes)."""

    def __init__(self, server_first: bool = False) -> None:
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.wire: list[tuple[bool, bytes]] = []
        held = b""
        if server_first:  # on the wire before the client's preface, read by it after
            self.server.initiate_connection()
            held = self.server.data_to_send()
            self.wire.append((False, held))
        self.client.initiate_connection()
        self.flush()
        if held:
            self.client.receive_data(held)
        else:
            self.server.initiate_connection()
        self.flush()

    def flush(self) -> None:
        for from_client, conn, peer in ((True, self.client, self.server),
                                        (False, self.server, self.client)):
            data = conn.data_to_send()
            if data:
                self.wire.append((from_client, data))
                peer.receive_data(data)

    def request(self, sid: int, body: bytes = REQUEST_BODY, **kw) -> None:
        self.client.send_headers(sid, request_headers(**kw))
        self.client.send_data(sid, body, end_stream=True)
        self.flush()

    def respond(self, sid: int, events, end: bool = True, head=SSE_HEAD, pad=None) -> None:
        self.server.send_headers(sid, head)
        self.flush()
        for ev in events:
            self.data(sid, ev, pad=pad)
        if end:
            self.server.end_stream(sid)
            self.flush()

    def data(self, sid: int, payload: bytes, pad=None) -> None:
        self.server.send_data(sid, payload, pad_length=pad)
        self.flush()

    def raw(self, from_client: bool, data: bytes) -> None:
        """Bytes h2 would not write, put on the wire as they are."""
        self.wire.append((from_client, data))


def feed(pair: Pair, tracker: StreamTracker | None = None, side: str = "client",
         split=None) -> StreamTracker:
    """The wire as SIDE's process sees it, each write at its own millisecond;
    SPLIT(bytes) cuts a write into the reads that deliver it."""
    tr = tracker or StreamTracker()
    for i, (from_client, data) in enumerate(pair.wire):
        outgoing = from_client == (side == "client")
        for part in (split(data) if split else [data]):
            tr.data(CONN, outgoing, part, (i + 1) * MS)
    return tr


def one_stream_pair(n: int = 5, pad=None) -> Pair:
    p = Pair()
    p.request(1)
    p.respond(1, [chunk(f"c{i}") for i in range(n)] + [DONE], pad=pad)
    return p


def test_a_stream_on_each_side_with_its_facts():
    p = one_stream_pair()
    for side in ("client", "server"):
        tr = feed(p, side=side)
        [s] = tr.pop_finished()
        assert (s["side"], s["http"], s["api"], s["model"], s["operation"]) == \
            (side, "2", "openai", "m-h2", "chat")
        assert (s["chunks"], s["events"], s["status"], s["end"], s["http_status"]) == \
            (5, 6, "done", "api", 200)
        assert s["time_to_first_chunk_ms"] is not None and s["grpc_method"] is None
        c = tr.counters
        assert (c["http2_connections"], c["http2_unreadable"], c["streams_open"]) == (1, 0, 0)
        assert "zl-secret" not in json.dumps(s)


def test_a_frame_split_across_every_byte_boundary():
    """Every cut of every write in two, and every write byte by byte: the
    same record (bar the times)."""
    p = one_stream_pair(n=3, pad=7)
    whole = feed(p).pop_finished()
    facts = [(s["chunks"], s["events"], s["status"], s["model"]) for s in whole]
    assert facts == [(3, 4, "done", "m-h2")]
    longest = max(len(d) for _, d in p.wire)
    for cut in range(1, longest):
        tr = feed(p, split=lambda d, k=cut: [d[:k], d[k:]] if k < len(d) else [d])
        got = [(s["chunks"], s["events"], s["status"], s["model"]) for s in tr.pop_finished()]
        assert got == facts, cut
    tr = feed(p, split=lambda d: [d[i:i + 1] for i in range(len(d))])
    assert [(s["chunks"], s["events"], s["status"], s["model"])
            for s in tr.pop_finished()] == facts


def test_a_hundred_concurrent_streams_on_one_connection():
    p = Pair()
    sids = [1 + 2 * i for i in range(100)]
    for sid in sids:
        p.client.send_headers(sid, request_headers())
        p.client.send_data(sid, REQUEST_BODY, end_stream=True)
    p.flush()
    for sid in sids:
        p.server.send_headers(sid, SSE_HEAD)
    for k in range(3):  # interleaved: every stream's first chunk, then every second one...
        for sid in sids:
            if sid % 7 == 0 and k == 2:
                continue  # these stop one short
            p.server.send_data(sid, chunk(f"{sid}-{k}"))
        p.flush()
    for sid in sids:
        p.server.send_data(sid, DONE, end_stream=True)
    p.flush()
    tr = feed(p)
    records = tr.pop_finished()
    assert len(records) == 100 and tr.counters["streams_open"] == 0
    assert sorted(s["chunks"] for s in records) == sorted(2 if sid % 7 == 0 else 3 for sid in sids)
    assert {s["status"] for s in records} == {"done"}


def _frame(ftype: int, flags: int, sid: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) \
        + payload


def test_padding_and_priority_on_headers_and_a_block_in_continuations():
    """The server's head, padded, with a priority, in a HEADERS frame and
    two CONTINUATIONs; DATA padded too (h2 pads DATA itself)."""
    p = Pair()
    p.request(1)
    block = Encoder().encode(SSE_HEAD + [("x-filler", "f" * 300)])
    a, b, c = block[:5], block[5:200], block[200:]
    padded = bytes([9]) + struct.pack(">IB", 0, 15) + a + b"\0" * 9
    p.raw(False, _frame(1, 0x8 | 0x20, 1, padded))      # HEADERS: PADDED, PRIORITY
    p.raw(False, _frame(9, 0, 1, b))                     # CONTINUATION
    p.raw(False, _frame(9, 0x4, 1, c))                   # CONTINUATION: END_HEADERS
    for i in range(4):
        body = chunk(f"p{i}")
        p.raw(False, _frame(0, 0x8, 1, bytes([i * 3]) + body + b"\0" * (i * 3)))
    p.raw(False, _frame(0, 0x1 | 0x8, 1, bytes([0]) + DONE))
    [s] = feed(p).pop_finished()
    assert (s["chunks"], s["status"], s["end"], s["http_status"]) == (4, "done", "api", 200)


def test_a_header_block_interrupted_is_unreadable():
    p = Pair()
    p.request(1)
    block = Encoder().encode(SSE_HEAD)
    p.raw(False, _frame(1, 0, 1, block[:2]))       # HEADERS, no END_HEADERS
    p.raw(False, _frame(0, 0, 1, chunk("x")))      # DATA where a CONTINUATION must be
    tr = feed(p)
    assert tr.counters["http2_framing"] == 1 and tr.counters["http2_unreadable"] == 1
    assert [s["status"] for s in tr.pop_finished()] == ["incomplete"]


def test_rst_stream_cancels_that_stream_only():
    p = Pair()
    p.request(1)
    p.request(3)
    p.respond(1, [chunk("a"), chunk("b")], end=False)
    p.respond(3, [chunk("a")], end=False)
    p.server.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
    p.flush()
    p.data(3, DONE)
    p.server.end_stream(3)
    p.flush()
    got = {(s["chunks"], s["status"], s["end"]) for s in feed(p).pop_finished()}
    assert got == {(2, "cancelled", "reset"), (1, "done", "api")}


def test_a_client_reset_is_seen_on_the_server_side_too():
    p = Pair()
    p.request(1)
    p.respond(1, [chunk("a")], end=False)
    p.client.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
    p.flush()
    [s] = feed(p, side="server").pop_finished()
    assert (s["side"], s["chunks"], s["status"]) == ("server", 1, "cancelled")


def test_goaway_ends_the_streams_above_its_last_stream_id():
    p = Pair()
    for sid in (1, 3, 5):
        p.request(sid)
        p.respond(sid, [chunk("a")], end=False)
    # (h2 would write nothing more after its GOAWAY: a server draining stream 1 does)
    p.raw(False, _frame(7, 0, 0, struct.pack(">II", 1, 0)))
    p.data(1, DONE)
    p.server.end_stream(1)
    p.flush()
    tr = feed(p)
    got = sorted((s["status"], s["end"]) for s in tr.pop_finished())
    assert got == [("cancelled", "goaway"), ("cancelled", "goaway"), ("done", "api")]


def test_hpack_referring_to_entries_never_seen_makes_the_connection_unreadable():
    """A header block that names dynamic-table entries the decoder never got
    (what the encoder's earlier blocks added): counted, the stream under way
    incomplete, no exception, nothing guessed."""
    enc = Encoder()
    enc.encode(SSE_HEAD + [("x-a", "1")])   # adds entries nobody here will see
    again = enc.encode(SSE_HEAD + [("x-a", "1")])  # refers to them
    p = Pair()
    p.request(1)
    p.request(3)
    p.respond(1, [chunk("a")], end=False)
    p.raw(False, _frame(1, 0x4, 3, again))
    p.raw(False, _frame(0, 0, 1, chunk("b")))
    tr = feed(p)
    c = tr.counters
    assert (c["http2_hpack"], c["http2_unreadable"], c["streams_incomplete"]) == (1, 1, 2)
    assert tr.pop_finished()[0]["chunks"] == 1 and c["streams_open"] == 0
    assert c["skipped_bytes"] > 0


def test_a_connection_joined_mid_way_is_counted_and_evicted():
    """The observer began after the connection did: its bytes start with
    frames (a second request's), no preface. Counted, the connection evicted
    (the kernel is told to ignore it), no stream made up."""
    p = one_stream_pair()
    p.request(3)
    p.respond(3, [chunk("x")] * 3 + [DONE])
    later = [(fc, d) for fc, d in p.wire[-4:]]
    evicted = []
    tr = StreamTracker()
    tr.on_evicted = evicted.append
    for i, (from_client, data) in enumerate(later):
        tr.data(CONN, from_client, data, i * MS)
    c = tr.counters
    assert (c["http2_midway"], c["http2_unreadable"], c["http2_connections"]) == (1, 1, 0)
    assert evicted == [CONN] and tr.pop_finished() == [] and tr.open_streams() == []


def test_a_server_that_writes_its_settings_before_reading_the_preface():
    """A server's first bytes are its SETTINGS frame (its own preface): the
    connection is followed from there, the client's preface read after."""
    p = Pair(server_first=True)
    assert not p.wire[0][0] and p.wire[0][1][3:5] == b"\x04\x00"  # SETTINGS, not an ACK
    p.request(1)
    p.respond(1, [chunk(f"c{i}") for i in range(5)] + [DONE])
    [s] = feed(p, side="server").pop_finished()
    assert (s["side"], s["chunks"], s["status"]) == ("server", 5, "done")


def test_lost_bytes_make_the_direction_unreadable():
    p = Pair()
    p.request(1)
    p.request(3)
    p.respond(1, [chunk("a"), chunk("b")], end=False)
    p.respond(3, [chunk("a")], end=False)
    p.data(1, chunk("c"))
    p.data(1, DONE)
    tr = StreamTracker()
    for i, (from_client, data) in enumerate(p.wire):
        lost = 40 if i == len(p.wire) - 2 else 0  # a piece the ring could not take
        tr.data(CONN, from_client, data, i * MS, lost=lost)
    records = tr.pop_finished()
    assert sorted((s["status"], s["lost_bytes"]) for s in records) == \
        [("incomplete", 40), ("incomplete", 40)]
    c = tr.counters
    assert (c["http2_lost"], c["lost_bytes"], c["streams_open"]) == (1, 40, 0)


def grpc_message(payload: bytes, compressed: bool = False) -> bytes:
    return bytes([int(compressed)]) + struct.pack(">I", len(payload)) + payload


GRPC_REQ = {"path": "/zl.Tokens/Stream", "content_type": "application/grpc"}
GRPC_HEAD = [(":status", "200"), ("content-type", "application/grpc")]


@pytest.mark.parametrize(("status", "expected"), [("0", ("done", "api")), ("13", ("error", "error"))])
def test_grpc_messages_are_chunks_and_its_status_ends_the_stream(status, expected):
    p = Pair()
    p.request(1, body=grpc_message(b"zl-secret request"), **GRPC_REQ)
    p.server.send_headers(1, GRPC_HEAD)
    body = b"".join(grpc_message(b"zlword %d" % i, compressed=i == 2) for i in range(6))
    # one DATA frame holds messages 0-2 and half of 3; the next the rest
    p.data(1, body[:40])
    p.data(1, body[40:])
    p.server.send_headers(1, [("grpc-status", status)], end_stream=True)
    p.flush()
    for side in ("client", "server"):
        tr = feed(p, side=side)
        [s] = tr.pop_finished()
        assert (s["api"], s["grpc_method"], s["http"], s["operation"]) == \
            ("grpc", "/zl.Tokens/Stream", "2", None)
        assert (s["chunks"], (s["status"], s["end"])) == (6, expected)
        assert tr.counters["grpc_compressed"] == 1
        assert "zl-secret" not in json.dumps(s) and "zlword" not in json.dumps(s)


def test_grpc_trailers_only_error_and_a_method_name_escaped():
    p = Pair()
    p.request(1, body=grpc_message(b"x"), path="/zl.T\u00e9\x01/S", content_type="application/grpc")
    p.server.send_headers(1, GRPC_HEAD + [("grpc-status", "5")], end_stream=True)
    p.flush()
    [s] = feed(p).pop_finished()
    assert (s["status"], s["chunks"], s["grpc_method"]) == ("error", 0, "/zl.T\ufffd\ufffd\\x01/S")


def test_a_response_that_is_not_a_stream_gives_none_and_http1_is_untouched():
    p = Pair()
    p.client.send_headers(1, [(":method", "GET"), (":path", "/v1/models"), (":scheme", "https"),
                              (":authority", "a")], end_stream=True)
    p.flush()
    p.server.send_headers(1, [(":status", "200"), ("content-type", "application/json")])
    p.server.send_data(1, b'{"data": []}', end_stream=True)
    p.flush()
    tr = feed(p)
    assert tr.pop_finished() == [] and tr.counters["streams_open"] == 0
    assert tr._conns[CONN].h2.exchanges == {}  # forgotten once over both ways


def test_the_parser_alone_keeps_no_header_but_the_few_it_reads():
    d = http2.Http2Direction(requests=False)
    out: list = []
    block = Encoder().encode(SSE_HEAD + [("authorization", "Bearer zl-secret")])
    d.feed(_frame(1, 0x4, 1, block), 0, out)
    [(kind, sid, head, end)] = out
    assert (kind, sid, head.status, head.event_stream, end) == (http2.HEADERS, 1, 200, True, False)
    assert "zl-secret" not in repr(head) + repr(d)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 3))
def test_any_bytes_after_the_preface_never_raise(junk, lost):
    tr = StreamTracker()
    tr.data(CONN, True, http2.PREFACE + junk[:100], 0)
    tr.data(CONN, False, junk, 1, lost=lost)
    tr.data(CONN, True, junk[::-1], 2)
    tr.closed(CONN, 3)
    assert tr.counters["streams_open"] == 0


def test_random_cuts_of_a_busy_connection():
    """Ten streams interleaved, the wire cut at random points: every stream whole."""
    p = Pair()
    for sid in range(1, 21, 2):
        p.request(sid)
    for k in range(4):
        for sid in range(1, 21, 2):
            if k == 0:
                p.server.send_headers(sid, SSE_HEAD)
            p.server.send_data(sid, chunk(f"{k}"), pad_length=k)
        p.flush()
    for sid in range(1, 21, 2):
        p.server.send_data(sid, DONE, end_stream=True)
    p.flush()
    rng = random.Random(46)

    def cuts(d: bytes) -> list[bytes]:
        points = sorted(rng.sample(range(1, len(d)), min(5, len(d) - 1))) if len(d) > 1 else []
        return [d[a:b] for a, b in zip([0, *points], [*points, len(d)])]

    for _ in range(20):
        records = feed(p, split=cuts).pop_finished()
        assert sorted((s["chunks"], s["status"]) for s in records) == [(4, "done")] * 10
