# SPDX-License-Identifier: Apache-2.0
"""pyxdp.streams.tracker (docs/spec.md §11): the stream objects built from
the bytes a process read and wrote, on recorded exchanges (the real SDKs
against a mock server from PyPI, tests/fixtures/streams) seen from the
client's and the server's side, and on hostile shapes."""

import json
import random
import re
import statistics
import tracemalloc

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pyxdp.streams.gaps import Gaps
from pyxdp.streams.metrics import StreamMetrics
from pyxdp.streams.tracker import StreamTracker
from support.sse_bytes import (
    MARKER,
    MS,
    anthropic_events,
    chunked,
    openai_events,
    recorded,
    request,
    sse_head,
    stream,
)

FIELDS = {"pid", "comm", "side", "tls", "local", "remote", "api", "model", "events", "chunks",
          "tokens", "time_to_first_chunk_ms", "chunk_gap_ms", "stalls", "duration_ms", "status"}


def replay(tr: StreamTracker, records, side: str, conn=(100, 3), until=None) -> None:
    """A recorded connection as the client (writes c2s, reads s2c) or the server saw it;
    it closes at its own end-of-file mark."""
    tr.describe(conn, pid=conn[0], comm=f"py-{side}", tls=False, local="127.0.0.1:40000",
                remote="127.0.0.1:9999")
    mine = "c2s" if side == "client" else "s2c"
    for t, tag, b in records:
        if until is not None and t > until:
            break
        if tag == mine + ":eof":
            tr.closed(conn, t)
            return
        if not tag.endswith(":eof"):
            tr.data(conn, tag == mine, b, t)


def eof_time(records, tag: str) -> int:
    return next(t for t, g, b in records if g == tag + ":eof")


def one(tr: StreamTracker) -> dict:
    got = tr.pop_finished()
    assert len(got) == 1, got
    return got[0]


# --- recorded: what the SDK saw ----------------------------------------------------------

@pytest.mark.parametrize("name,api,model", [("openai_chat", "openai", "gpt-4o-mini"),
                                            ("openai_tool_calls", "openai", "gpt-4o-mini"),
                                            ("anthropic_messages", "anthropic", "claude-sonnet-4-5"),
                                            ("openai_usage_paced", "openai", "gpt-5-mini"),
                                            ("openai_responses", "openai", "gpt-5")])
@pytest.mark.parametrize("side", ["client", "server"])
def test_recorded_stream_matches_the_sdk(name, api, model, side):
    rec = recorded(name)
    tr = StreamTracker()
    replay(tr, rec["connections"][0], side)
    s = one(tr)
    assert FIELDS <= set(s) and json.loads(json.dumps(s)) == s
    assert (s["side"], s["api"], s["model"], s["status"], s["end"]) == (side, api, model, "done", "api")
    sdk = rec["sdk"]
    assert s["chunks"] == sdk["chunks"]
    assert s["events"] > s["chunks"]
    first_request_end = max(t for t, g, b in rec["connections"][0] if g == "c2s")
    # The SDK's first chunk came after the wire's; TTFT is measured from the request's end.
    assert s["time_to_first_chunk_ms"] <= (sdk["chunk_ns"][0] - first_request_end) / MS
    times = sdk["chunk_ns"]
    if name == "openai_responses":
        # The SDK's Responses API events came out in a burst ~200 ms after the last byte
        # (it builds its event models as it meets them, slow on this machine): its times
        # say nothing of the wire, so the proxy's are the reference.
        times = [t for t, g, b in rec["connections"][0] if g == "s2c" and b"text.delta" in b]
    gaps = np.diff(times) / MS
    assert abs(s["chunk_gap_ms"]["p50"] - statistics.median(gaps)) < 2.0
    assert s["chunk_gap_ms"]["max"] >= s["chunk_gap_ms"]["p99"] >= s["chunk_gap_ms"]["p50"]
    if "tokens" in sdk:  # the SDK saw the usage
        assert s["tokens"] == sdk["tokens"] is not None
    else:  # fakellm sends no usage chunk to OpenAI clients; Anthropic's message_delta has one
        usage = re.findall(rb'"output_tokens": (\d+)',
                           b"".join(b for t, g, b in rec["connections"][0]))
        assert s["tokens"] == (int(usage[-1]) if api == "anthropic" else None)
    assert s["stalls"] == 0 and s["tls"] is False and s["pid"] == 100
    assert tr.counters["streams_done"] == 1 and tr.counters["streams_open"] == 0


def test_recorded_cancel_is_cancelled_on_both_sides():
    rec = recorded("openai_cancelled")
    records = rec["connections"][0]
    for side in ("client", "server"):
        tr = StreamTracker()
        replay(tr, records, side)
        s = one(tr)
        assert (s["status"], s["end"]) == ("cancelled", "close")
        # The client read what arrived before it closed; the SDK yielded 3 of them.
        assert s["chunks"] >= rec["sdk"]["chunks"]
        if side == "client":
            read_before_close = sum(1 for t, g, b in records
                                    if g == "s2c" and t < eof_time(records, "c2s")
                                    and b'"content"' in b)
            assert s["chunks"] == read_before_close


def test_recorded_keepalive_plain_then_stream_on_one_connection():
    rec = recorded("openai_keepalive")
    tr = StreamTracker()
    for i, c in enumerate(rec["connections"]):
        replay(tr, c, "client", conn=(100, i))
    got = tr.pop_finished()
    assert [s["chunks"] for s in got] == rec["sdk"]["chunks"]
    assert [s["model"] for s in got] == ["gpt-4o-mini", "gpt-4o", "gpt-4o-mini"]
    assert all(s["status"] == "done" for s in got)


# --- made shapes --------------------------------------------------------------------------

def test_several_streams_in_turn_on_one_keepalive_connection():
    tr = StreamTracker()
    t = stream(tr, (1, 1), openai_events(("a", "b")))
    tr.data((1, 1), True, request(stream=False), t + MS)
    body = b'{"choices":[{"message":{"content":"x"}}]}'
    tr.data((1, 1), False, b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body) + body, t + 2 * MS)
    t = stream(tr, (1, 1), anthropic_events(("c", "d", "e")), t=t + 3 * MS,
               req=request(path=b"/v1/messages", model="claude-x"))
    got = tr.pop_finished()
    assert [(s["api"], s["chunks"], s["status"]) for s in got] == [("openai", 2, "done"),
                                                                  ("anthropic", 3, "done")]


def test_two_interleaved_streams_of_one_process():
    tr = StreamTracker()
    a, b = openai_events(tuple("abcdef")), anthropic_events(tuple("xyz"))
    tr.data((7, 1), True, request(), 0)
    tr.data((7, 2), True, request(path=b"/v1/messages"), 1)
    tr.data((7, 1), False, sse_head(), 2)
    tr.data((7, 2), False, sse_head(), 3)
    pa, pb = chunked(a), chunked(b)
    for i in range(max(len(pa), len(pb))):
        for conn, parts in (((7, 1), pa), ((7, 2), pb)):
            if i < len(parts):
                tr.data(conn, False, parts[i], 10 * MS * (i + 1))
    got = sorted(tr.pop_finished(), key=lambda s: s["api"])
    assert [(s["api"], s["chunks"]) for s in got] == [("anthropic", 3), ("openai", 6)]


def test_events_split_byte_by_byte_and_all_in_one_write():
    whole = b"".join([sse_head()] + chunked(openai_events(tuple("abcdefgh"), usage=8)))
    results = []
    for pieces in ([whole[i:i + 1] for i in range(len(whole))], [whole]):
        tr = StreamTracker()
        tr.data((1, 1), True, request(), 0)
        for i, p in enumerate(pieces):
            tr.data((1, 1), False, p, MS + i)
        s = one(tr)
        results.append((s["chunks"], s["tokens"], s["status"], s["events"]))
    assert results[0] == results[1] == (8, 8, "done", 11)  # role, 8, usage, [DONE]


def test_hundred_thousand_events():
    tr = StreamTracker()
    t = stream(tr, (1, 1), openai_events(tuple(str(i) for i in range(100_000))), step=10_000)
    s = one(tr)
    assert s["chunks"] == 100_000 and s["status"] == "done" and t > 0
    assert s["chunk_gap_ms"]["p50"] == pytest.approx(0.01, rel=0.01)


def test_reset_mid_event_and_process_exit_cancel():
    tr = StreamTracker()
    evs = chunked(openai_events(tuple("abcd")), end=False)
    tr.data((5, 1), True, request(), 0)
    tr.data((5, 1), False, sse_head() + b"".join(evs[:3]) + evs[3][:20], MS)
    tr.closed((5, 1), 2 * MS)
    s = one(tr)
    assert (s["chunks"], s["status"], s["end"]) == (2, "cancelled", "close")
    tr.data((6, 1), False, request(), 0)  # a server that read a request, wrote part of a stream
    tr.data((6, 1), True, sse_head() + b"".join(evs[:2]), MS)
    tr.data((6, 2), True, request(), 0)  # and another streaming request, not yet answered
    tr.process_exited(6, 3 * MS)
    got = tr.pop_finished()
    assert sorted((s["side"], s["chunks"], s["status"], s["end"]) for s in got) == [
        ("client", 0, "cancelled", "exit"), ("server", 1, "cancelled", "exit")]
    assert tr.counters["connections"] == 0 and tr.counters["streams_open"] == 0


def test_errors():
    tr = StreamTracker()
    tr.data((1, 1), True, request(), 0)
    tr.data((1, 1), False, b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
            b"content-length: 2\r\n\r\n{}", MS)
    s = one(tr)
    assert (s["status"], s["http_status"], s["chunks"], s["api"]) == ("error", 429, 0, "openai")
    stream(tr, (1, 2), openai_events(("a",), done=False) + [
        b'data: {"error":{"message":"overloaded"}}\n\n'])
    assert (one(tr)["status"]) == "error"
    stream(tr, (1, 3), anthropic_events(("a",))[:4] + [
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n'])
    s = one(tr)
    assert (s["status"], s["api"], s["chunks"]) == ("error", "anthropic", 1)
    # a plain (not streaming) request's error is not a stream
    tr.data((1, 4), True, request(stream=False), 0)
    tr.data((1, 4), False, b"HTTP/1.1 500 Oops\r\ncontent-length: 0\r\n\r\n", MS)
    assert tr.pop_finished() == [] and tr.counters["streams_error"] == 3


def test_an_event_stream_of_no_known_api():
    tr = StreamTracker()
    stream(tr, (1, 1), [b"data: tick\n\n", b": beat\n\n", b"event: x\ndata: {\"n\": 2}\n\n"],
           req=b"GET /events HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n")
    s = one(tr)
    assert (s["api"], s["events"], s["chunks"], s["status"], s["model"]) == (
        "sse", 2, 2, "done", None)
    assert tr.counters["comments"] == 1


def test_usage_only_and_role_only_events_are_not_chunks_and_tokens_are_reported():
    tr = StreamTracker()
    stream(tr, (1, 1), openai_events((), usage=42))
    s = one(tr)
    assert (s["events"], s["chunks"], s["tokens"], s["chunk_gap_ms"],
            s["time_to_first_chunk_ms"]) == (3, 0, 42, None, None)


def test_malformed_json_counted_and_the_stream_goes_on():
    tr = StreamTracker()
    stream(tr, (1, 1), openai_events(("a",), done=False) + [b"data: {not json\n\n"] +
           openai_events(("b",)))
    s = one(tr)
    assert (s["chunks"], s["status"]) == (2, "done") and tr.counters["malformed_events"] == 1


def test_lost_bytes_are_counted_and_the_stream_goes_on():
    tr = StreamTracker()
    evs = chunked(openai_events(tuple("abcdefghij")))
    tr.data((1, 1), True, request(), 0)
    tr.data((1, 1), False, sse_head(), MS)
    for i, p in enumerate(evs):
        if i in (4, 5):
            continue
        tr.data((1, 1), False, p, (i + 2) * MS, lost=len(evs[4]) + len(evs[5]) if i == 6 else 0)
    s = one(tr)
    assert (s["chunks"], s["status"], s["lost_bytes"]) == (8, "incomplete", len(evs[4]) + len(evs[5]))
    assert tr.counters["lost_bytes"] == s["lost_bytes"] and tr.counters["resyncs"] >= 1


def test_compressed_is_counted_not_a_stream_and_http2_settings_alone_make_none():
    tr = StreamTracker()
    stream(tr, (1, 1), [b"\x1f\x8b" + bytes(100)], head=sse_head(b"Content-Encoding: gzip\r\n"))
    tr.data((1, 2), True, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04", 0)
    tr.data((1, 2), False, b"\x00\x00\x06\x04\x00\x00\x00\x00\x00" * 3, 1)
    assert tr.pop_finished() == [] and tr.open_streams() == []
    c = tr.counters
    assert (c["compressed"], c["http2_connections"], c["http2_unreadable"]) == (1, 1, 0)


def test_stalls_and_gaps():
    tr = StreamTracker(stall_ms=100)
    conn = (1, 1)
    tr.data(conn, True, request(), 0)
    tr.data(conn, False, sse_head(), MS)
    gaps = [10, 10, 250, 10, 101, 10]
    t = 2 * MS
    for i, p in enumerate(chunked(openai_events(tuple("abcdefg")))):
        t += (gaps[i - 2] if 2 <= i < 2 + len(gaps) else 1) * MS
        tr.data(conn, False, p, t)
    s = one(tr)
    assert s["stalls"] == 2 and s["chunk_gap_ms"]["max"] == 250
    assert s["chunk_gap_ms"]["p50"] == 10 and s["time_to_first_chunk_ms"] == 4  # 0 -> 1+2+1


def test_open_streams_and_ttft_on_the_server_side():
    tr = StreamTracker()
    stream(tr, (9, 1), openai_events(("a", "b", "c"), done=False), side="server", end=False,
           step=MS)
    assert tr.pop_finished() == []
    (s,) = tr.open_streams()
    assert (s["status"], s["side"], s["chunks"], s["end"]) == ("open", "server", 3, None)
    assert s["time_to_first_chunk_ms"] == 7  # request read at 0, head at 5 ms, role at 6, a at 7
    assert tr.counters["streams_open"] == 1


def test_at_most_max_streams_oldest_evicted_and_counted():
    m = StreamMetrics()
    tr = StreamTracker(max_streams=10, metrics=m)
    told = []
    tr.on_evicted = told.append
    for i in range(25):
        stream(tr, (i, 1), openai_events(("a",), done=False), end=False)
    assert len(tr.open_streams()) == 10 and tr.counters["evicted"] == 15
    assert tr.counters["evicted_client"] == 15 and tr.counters["evicted_server"] == 0
    assert tr.counters["connections"] == 10 and tr.counters["streams_open"] == 10
    assert b'zerolayer_stream_evictions_total{side="client"} 15.0' in m.render()
    assert told == [(i, 1) for i in range(15)]  # the kernel side ignores them too


def test_an_evicted_connection_never_comes_back_mid_way():
    tr = StreamTracker(max_streams=4)
    words = tuple("abcdef")
    evs = chunked(openai_events(words))
    for i in range(8):  # each past the first four evicts one, mid-stream
        tr.data((i, 1), True, request(), 0)
        tr.describe((i, 1), pid=i, socket=1000 + i)
        tr.data((i, 1), False, sse_head() + b"".join(evs[:2]), MS)
    assert tr.counters["evicted"] == 4
    for i in range(8):  # their later chunks, [DONE] and closes
        tr.data((i, 1), False, b"".join(evs[2:]), 10 * MS)
        tr.describe((i, 1), pid=i, socket=1000 + i)  # the kernel announced it again: ignored
        tr.closed((i, 1), 11 * MS)
    got = tr.pop_finished()
    assert sorted(s["pid"] for s in got) == [4, 5, 6, 7]
    assert all(s["status"] == "done" and s["http_status"] == 200 and s["chunks"] == len(words)
               for s in got)
    c = tr.counters
    assert c["streams_done"] == 4 and c["evicted"] == 4 and c["streams_open"] == 0
    # after its close the descriptor is free: a new connection on it is seen
    stream(tr, (0, 1), openai_events(("x", "y")))
    tr.closed((0, 1), 99 * MS)
    assert one(tr)["chunks"] == 2


def test_a_reused_descriptor_of_an_evicted_connection_is_a_new_connection():
    tr = StreamTracker(max_streams=1)
    tr.describe((1, 1), pid=1, socket=500)
    tr.data((1, 1), True, request(), 0)
    tr.describe((2, 1), pid=2, socket=501)  # evicts (1, 1), whose close the kernel lost
    tr.describe((1, 1), pid=1, socket=502)  # fd 1 of pid 1 now holds another socket
    stream(tr, (1, 1), openai_events(("a",)))
    tr.closed((1, 1), 99 * MS)
    assert one(tr)["chunks"] == 1


def _server_half(tr, conn, evs, upto, t=MS):
    tr.data(conn, False, request(), 0)
    tr.data(conn, True, sse_head() + b"".join(evs[:upto]), t)


@pytest.mark.parametrize("parent_ends", ["exit", "close"])
def test_a_fork_mid_stream_is_one_stream_ended_once(parent_ends):
    """A server reads the request and writes part of the stream, forks; the
    parent exits (or closes its descriptor, the socket shared), the child
    writes the rest and closes: one stream, done."""
    tr = StreamTracker()
    evs = chunked(openai_events(tuple("abcd")))
    tr.describe((10, 0, 7), pid=10, comm="srv", socket=4242)
    _server_half(tr, (10, 0, 7), evs, 2)
    assert tr.forked(10, 11) == [(11, 0, 7)]
    if parent_ends == "exit":
        tr.process_exited(10, 2 * MS)
    else:
        tr.closed((10, 0, 7), 2 * MS, shared=True)
    assert tr.pop_finished() == []
    tr.describe((11, 0, 7), pid=11, comm="srv", socket=4242)  # the child's first call
    tr.data((11, 0, 7), True, b"".join(evs[2:]), 3 * MS)
    tr.closed((11, 0, 7), 4 * MS)
    s = one(tr)
    assert (s["side"], s["status"], s["chunks"], s["pid"]) == ("server", "done", 4, 11)
    assert s["time_to_first_chunk_ms"] is not None
    assert tr.counters["streams_open"] == 0 and tr.counters["connections"] == 0


def test_a_socket_passed_on_is_adopted_by_its_new_holder():
    tr = StreamTracker()
    evs = chunked(openai_events(tuple("abc")))
    tr.describe((20, 0, 5), pid=20, socket=77)
    _server_half(tr, (20, 0, 5), evs, 1)
    tr.closed((20, 0, 5), 2 * MS, shared=True)  # sent over a UNIX socket, then closed
    tr.describe((21, 0, 9), pid=21, socket=77)  # the receiver's descriptor
    tr.data((21, 0, 9), True, b"".join(evs[1:]), 3 * MS)
    tr.closed((21, 0, 9), 4 * MS)
    s = one(tr)
    assert (s["status"], s["chunks"], s["pid"]) == ("done", 3, 21)


def test_an_unshared_close_still_ends_the_stream_at_once():
    tr = StreamTracker()
    evs = chunked(openai_events(tuple("abc")))
    tr.describe((30, 0, 5), pid=30, socket=78)
    _server_half(tr, (30, 0, 5), evs, 2)
    tr.closed((30, 0, 5), 2 * MS, shared=False)
    assert one(tr)["status"] == "cancelled"


def test_bytes_lost_at_the_end_make_the_stream_incomplete():
    """The ring lost the last chunks and [DONE]; the close says how many
    bytes the connection carried (the session passes the difference)."""
    tr = StreamTracker()
    evs = chunked(openai_events(tuple("abcdef")))
    tr.data((1, 1), True, request(), 0)
    tr.data((1, 1), False, sse_head() + b"".join(evs[:3]), MS)
    tr.data((1, 1), False, b"", 2 * MS, lost=sum(map(len, evs[3:])))
    tr.closed((1, 1), 2 * MS)
    s = one(tr)
    assert (s["status"], s["chunks"]) == ("incomplete", 2)
    assert s["lost_bytes"] == sum(map(len, evs[3:]))
    assert tr.counters["streams_incomplete"] == 1


def test_a_process_name_is_escaped_not_dropped():
    tr = StreamTracker()
    tr.describe((1, 1), pid=1, comm="a\x1b]0;x\x07b")
    stream(tr, (1, 1), openai_events(("a",)))
    assert one(tr)["comm"] == "a\\x1b]0;x\\x07b"


def test_non_http_traffic_is_ignored_and_bounded():
    tr = StreamTracker(max_streams=100)
    rng = random.Random(1)
    for i in range(1000):
        tr.data((i % 50, i), i % 2 == 0, rng.randbytes(rng.randrange(1, 3000)), i)
    assert tr.pop_finished() == [] and tr.counters["connections"] == 100


def test_memory_per_stream_is_bounded():
    tr = StreamTracker()
    n = 500
    for i in range(n):  # each stream open, with 20 gaps
        stream(tr, (i, 1), openai_events(tuple("x" * 20), done=False), end=False, step=MS)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    tr2 = StreamTracker()
    for i in range(n):
        stream(tr2, (i, 1), openai_events(tuple("x" * 20), done=False), end=False, step=MS)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    per = sum(s.size_diff for s in after.compare_to(before, "filename")) / n
    # A connection (two parsers, no bytes held) and its stream with 20 gaps.
    print(f"\n  memory: {per:.0f} bytes per connection with an open stream")
    assert per < 2500, per
    # A long stream keeps a bounded gap store whatever its length and spread
    g = Gaps()
    rng = random.Random(3)
    for _ in range(200_000):
        g.add(int(rng.lognormvariate(9, 1.5)))
    assert len(g._keys) <= 128 and g._exact is None


def test_gap_percentiles_within_their_stated_error():
    rng = random.Random(4)
    for spread in (0.05, 0.3, 1.5):
        values = [int(rng.lognormvariate(10, spread)) for _ in range(20_000)]
        g = Gaps()
        for v in values:
            g.add(v)
        bound = 2.0 ** -(g._bits + 1)  # half a bin, at the resolution the spread left
        assert g._bits >= {0.05: 7, 0.3: 5, 1.5: 2}[spread]
        for q in (0.5, 0.99):
            want = float(np.percentile(values, q * 100))
            assert abs(g.percentile(q) - want) <= want * bound + 1, (spread, q)
        assert g.max == max(values)
    small = Gaps()
    for v in (5, 1, 9, 3):
        small.add(v)
    assert small.percentile(0.5) == statistics.median([5, 1, 9, 3])


def test_nothing_that_leaves_carries_content():
    m = StreamMetrics()
    tr = StreamTracker(metrics=m)
    secret = MARKER.encode()
    evs = openai_events((MARKER,) * 3, model="gpt") + [b"data: {\"" + secret + b"\n\n"]
    stream(tr, (1, 1), evs, req=request(content=MARKER), side="server")
    stream(tr, (1, 2), evs[:2], req=request(content=MARKER), end=False)
    stream(tr, (1, 3), anthropic_events((MARKER,)), head=sse_head(b"X-Note: " + secret + b"\r\n"))
    tr.data((1, 4), False, b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\nevent: "
            + secret + b"\ndata: " + secret + b"\n\n", 0)
    tr.describe((1, 5), pid=1, comm="c", local="x", remote="y")
    seen = [tr.pop_finished(), tr.open_streams(), tr.counters]
    text = json.dumps(seen) + repr(tr) + repr(seen) + m.render().decode()
    for c in tr._conns.values():
        text += repr(c) + repr(c.wrote) + repr(c.read) + repr(c.stream)
    assert MARKER not in text and len(seen[0]) == 2 and len(seen[1]) == 2
    with pytest.raises(ValueError) as err:
        StreamTracker(max_streams=0)
    assert MARKER not in str(err.value)


def test_describe_after_data_and_bounded_names():
    tr = StreamTracker()
    conn = (3, 9)
    stream(tr, conn, openai_events(("a",), done=False), end=False)
    tr.describe(conn, pid=3, comm="x" * 100 + "\x1b", tls=True, local="[::1]:5", remote=None)
    (s,) = tr.open_streams()
    assert (s["pid"], s["comm"], s["tls"], s["local"], s["remote"]) == (3, "x" * 32, True,
                                                                        "[::1]:5", None)


def test_a_stream_joined_mid_way_is_followed_to_its_end():
    evs = chunked(openai_events(tuple("abcdef")))
    tr = StreamTracker()
    for i, p in enumerate(evs[3:]):  # chunked framing: the chunk-size line comes first
        tr.data((1, 1), False, p, (i + 1) * MS)
    whole = b"".join(openai_events(tuple("abcdef")))
    events = whole.split(b"\n\n")
    tail = b"\n\n".join(events[2:])  # no framing known: the body is read until the close
    tr.data((1, 2), True, tail, MS)
    tr.closed((1, 2), 2 * MS)
    got = tr.pop_finished()
    assert [(s["side"], s["chunks"], s["status"], s["http_status"], s["time_to_first_chunk_ms"])
            for s in got] == [("client", 4, "done", None, None), ("server", 5, "done", None, None)]


def test_a_thousand_concurrent_streams_and_the_cost_of_a_chunk(capsys):
    """1,000 streams on 1,000 connections, both sides seen (client and server
    processes on one host), chunks interleaved: the CPU time per chunk is
    printed (not asserted: it depends on the machine)."""
    import time

    m = StreamMetrics()
    tr = StreamTracker(metrics=m)
    n, rounds = 1000, 20
    parts = chunked(openai_events(tuple(f"t{i}" for i in range(rounds)), usage=rounds))
    for i in range(n):
        for side, pid in (("client", 10_000 + i), ("server", 1)):
            out = side == "client"
            tr.data((pid, i), out, request(), 0)
            tr.data((pid, i), not out, sse_head(), MS)
    t = 2 * MS
    t0 = time.thread_time()
    for p in parts:
        t += 20 * MS
        for i in range(n):
            tr.data((1, i), True, p, t)
            tr.data((10_000 + i, i), False, p, t + 50_000)
    cpu = time.thread_time() - t0
    got = tr.pop_finished()
    assert len(got) == 2 * n and {(s["chunks"], s["tokens"], s["status"]) for s in got} == {
        (rounds, rounds, "done")}
    assert {s["chunk_gap_ms"]["p50"] for s in got} == {20.0}
    with capsys.disabled():
        print(f"\n  tracker: {cpu / (2 * n * rounds) * 1e9:.0f} ns of CPU per chunk "
              f"(2,000 streams, metrics on, {len(parts[2])}-byte chunks)")


_PIECES = [request(), sse_head(), *chunked(openai_events(tuple("abc"), usage=3)),
           request(path=b"/v1/messages"), sse_head(b"Content-Encoding: br\r\n"),
           *chunked(anthropic_events(("x", "y"))), b"HTTP/1.1 100 Continue\r\n\r\n",
           b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", b"PRI * HTTP/2.0\r\n\r\n",
           b"HTTP/1.1 101 Up\r\n\r\n", b"0\r\n\r\n", b"data: x\n\n", b"\r", b"fffffff\r\n",
           b"event: error\ndata: {}\n\n", b"HTTP/1.1 503 No\r\ncontent-length: 0\r\n\r\n",
           b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
           b"\x00\x00\x00\x04\x00\x00\x00\x00\x00", b"\x00\x00\x04\x03\x00\x00\x00\x00\x01\x00\x00\x00\x08"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.sampled_from(_PIECES), st.binary(max_size=40)),
                          st.integers(0, 5), st.booleans(), st.sampled_from([0, 0, 0, 1, 9, 500]),
                          st.integers(0, 30)), max_size=30),
       st.sampled_from([1, 2, 50]))
@example([(b"data:", 0, False, 0, 2)], 1)  # joined mid-way, no event yet: not counted open
def test_any_bytes_in_any_order_never_raise_and_the_books_balance(calls, max_streams):
    m = StreamMetrics(models_per_owner=2)
    tr = StreamTracker(max_streams=max_streams, stall_ms=5, metrics=m)
    t = 0
    for payload, conn, outgoing, lost, action in calls:
        t += 3 * MS
        key = (conn % 3, conn)
        tr.data(key, outgoing, payload, t, lost=lost)
        if action == 0:
            tr.closed(key, t)
        elif action == 1:
            tr.process_exited(conn % 3, t)
    c = tr.counters
    finished = tr.pop_finished()
    assert c["streams_open"] == len(tr.open_streams()) >= 0
    assert len(finished) + c["reports_dropped"] == (c["streams_done"] + c["streams_cancelled"]
                                                    + c["streams_error"] + c["streams_incomplete"])
    assert all(s["status"] in ("done", "cancelled", "error", "incomplete") for s in finished)
    assert all(s["lost_bytes"] == 0 for s in finished if s["status"] != "incomplete")
    json.dumps(finished)
    m.render()


def test_binary_bytes_that_begin_like_an_event_stream_are_no_stream():
    """A connection joined mid-way whose bytes start like an event stream
    (`: `, `id:`, `data:`) but never make a well-formed event, a binary
    protocol's frames: no record, counted; a real one joined mid-way is."""
    import os

    tr = StreamTracker()
    frames = [b": \x00\x00\x01\x10" + os.urandom(200), b"id:\x07\x00" + os.urandom(300),
              b"data:\x00\xff\xfe" + os.urandom(64)]
    for i, first in enumerate(frames):
        conn = (50 + i, 3)
        tr.data(conn, True, first, MS)
        for j in range(20):
            tr.data(conn, True, os.urandom(100).replace(b"\n", b"\x01"), (j + 2) * MS)
        assert tr.open_streams() == []
        tr.closed(conn, 30 * MS)
    assert tr.pop_finished() == [] and tr.counters["unconfirmed"] == len(frames)
    real = (60, 3)
    for i, p in enumerate(openai_events(tuple("abc"))[1:]):  # after the role's event
        tr.data(real, True, p, (i + 1) * MS)
    tr.closed(real, 10 * MS)
    [got] = tr.pop_finished()
    assert (got["chunks"], got["status"]) == (3, "done")
    assert tr.counters["unconfirmed"] == len(frames)
