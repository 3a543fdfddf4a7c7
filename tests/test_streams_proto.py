# SPDX-License-Identifier: Apache-2.0
"""pyxdp.streams.http1, sse_events and api_events (docs/spec.md §11):
HTTP/1.1 framing, the WHATWG event parser and the OpenAI/Anthropic
classification, on byte streams recorded
from a mock server and the real SDKs (tests/fixtures/streams, see its
record.py) and on hostile shapes made here (tests/support/sse_bytes.py)."""

import json
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyxdp.streams import api_events, http1, sse_events
from support.sse_bytes import (
    MARKER,
    anthropic_events,
    chunked,
    openai_events,
    recorded,
    request,
    sse_head,
)


def parse(pieces, lost=None) -> list:
    """Everything one direction parser reports for these reads."""
    d = http1.HttpDirection()
    out: list = []
    for i, p in enumerate(pieces):
        d.feed(p, (lost or {}).get(i, 0), out)
    return out


def events(out) -> list:
    return [m[1] for m in out if m[0] == http1.EVENT]


def classes(out) -> list:
    return [e[0] for e in events(out)]


# --- recorded streams ---------------------------------------------------------------------

def directions(rec: dict, tag: str) -> list[bytes]:
    return [b for c in rec["connections"] for t, g, b in c if g == tag]


@pytest.mark.parametrize("name,model", [("openai_chat", "gpt-4o-mini"),
                                        ("openai_tool_calls", "gpt-4o-mini"),
                                        ("anthropic_messages", "claude-sonnet-4-5"),
                                        ("openai_usage_paced", "gpt-5-mini"),
                                        ("openai_responses", "gpt-5")])
def test_recorded_streams_count_what_the_sdk_yielded(name, model):
    rec = recorded(name)
    out = parse(directions(rec, "s2c"))
    assert classes(out).count(api_events.CHUNK) == rec["sdk"]["chunks"]
    assert classes(out)[-1] == api_events.END
    assert out[0][:3] == (http1.RESPONSE_HEAD, 200, True)
    # llm-mock-api writes no last chunk before the client, done at [DONE], closes
    assert out[-1][0] == http1.RESPONSE_END or name == "openai_usage_paced"
    api = "anthropic" if name.startswith("anthropic") else "openai"
    assert {e[1] for e in events(out)} == {api}
    requests = parse(directions(rec, "c2s"))
    assert [m[0] for m in requests] == [http1.REQUEST_HEAD, http1.REQUEST_END]
    assert requests[1][1:3] == (model, True)


def test_recorded_keepalive_connection_carries_a_plain_response_then_a_stream():
    rec = recorded("openai_keepalive")
    both = rec["connections"][1]
    out = parse([b for t, g, b in both if g == "s2c"])
    heads = [m for m in out if m[0] == http1.RESPONSE_HEAD]
    assert [h[2] for h in heads] == [False, True]  # JSON, then an event stream
    assert classes(out).count(api_events.CHUNK) == rec["sdk"]["chunks"][1]
    assert [m[0] for m in out].count(http1.RESPONSE_END) == 2


def test_recorded_stream_split_byte_by_byte_gives_the_same():
    rec = recorded("anthropic_messages")
    whole = b"".join(directions(rec, "s2c"))
    assert parse([whole[i:i + 1] for i in range(len(whole))]) == parse([whole])


# --- classification -----------------------------------------------------------------------

def c(data, etype=None):
    return api_events.classify(etype, data)


def test_openai_chunks_are_events_with_generated_output():
    ok = ['{"choices":[{"delta":{"content":"x"}}]}',
          '{"choices":[{"delta":{"reasoning_content":"think"}}]}',
          '{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}',
          '{"choices":[{"delta":{}},{"delta":{"content":"second choice"}}]}',
          '{"choices":[{"text":"legacy completions"}]}']
    for data in ok:
        assert c(data.encode())[:2] == (api_events.CHUNK, "openai"), data
    no = ['{"choices":[{"delta":{"role":"assistant"}}]}',
          '{"choices":[{"delta":{"role":"assistant","content":""}}]}',
          '{"choices":[{"delta":{"content":null}}]}',
          '{"choices":[{"delta":{"tool_calls":[]}}]}',
          '{"choices":[],"usage":{"completion_tokens":12}}',
          '{"choices":[{"delta":{},"finish_reason":"stop"}]}']
    for data in no:
        assert c(data.encode())[:2] == (api_events.OTHER, "openai"), data


def test_openai_model_tokens_end_and_errors():
    assert c(b'{"model":"gpt-4o","choices":[],"usage":{"completion_tokens":12}}')[2:4] == \
        ("gpt-4o", 12)
    assert c(b"[DONE]")[:2] == (api_events.END, "openai")
    assert c(b'{"error":{"message":"overloaded"}}')[0] == api_events.ERROR
    assert c(b'{"type":"error"}', b"error")[0] == api_events.ERROR


def test_model_names_are_bounded_and_printable():
    odd = json.dumps({"model": "m\x00\n\x1b[31m" + "x" * 500, "choices": []}).encode()
    model = c(odd)[2]
    assert model is not None and len(model) <= 96 and model.isprintable() and "\x1b" not in model


def test_anthropic_events():
    evs = parse([sse_head()] + chunked(anthropic_events(("a", "b", "c"), "claude-3", 9)))
    got = events(evs)
    assert [e[0] for e in got] == [api_events.OTHER] * 3 + [api_events.CHUNK] * 3 + [api_events.OTHER] * 2 + [api_events.END]
    assert {e[1] for e in got} == {"anthropic"}
    assert got[0][2] == "claude-3"
    assert got[-2][3] == 9


def test_malformed_json_is_an_event_not_a_chunk_and_the_stream_goes_on():
    evs = openai_events(("a",), done=False) + [b'data: {"choices":[{"delta":{"content":"x"}\n\n',
                                               b"event: content_block_delta\ndata: {broken\n\n"]
    out = parse([sse_head()] + chunked(evs + openai_events(("b",))))
    got = events(out)
    assert [e[0] for e in got] == [api_events.OTHER, api_events.CHUNK, api_events.OTHER, api_events.OTHER, api_events.OTHER,
                                   api_events.CHUNK, api_events.END]
    assert [bool(e[4] & api_events.MALFORMED) for e in got].count(True) == 2


def test_other_event_streams_are_generic():
    out = parse([sse_head()] + chunked([b"data: tick 1\n\n", b"event: update\ndata: {\"a\":1}\n\n"]))
    assert [(e[0], e[1]) for e in events(out)] == [(api_events.GENERIC, None)] * 2


# --- the WHATWG event rules ---------------------------------------------------------------

def test_line_endings_lf_crlf_cr_are_the_same():
    body = b"event: message_start\ndata: {\"a\":\ndata: 1}\n\n: comment\n\ndata: [DONE]\n\n"
    want = classes(parse([sse_head()] + chunked([body])))
    assert want == [api_events.OTHER, api_events.COMMENT, api_events.END]
    for eol in (b"\r\n", b"\r"):
        other = body.replace(b"\n", eol)
        assert classes(parse([sse_head()] + chunked([other]))) == want
        # and with the \r of a \r\n at the end of one read and its \n in the next
        whole = b"".join([sse_head()] + chunked([other]))
        for cut in range(len(sse_head()), len(whole)):
            assert classes(parse([whole[:cut], whole[cut:]])) == want


def test_data_lines_join_and_fields_without_space():
    out = parse([sse_head()] + chunked([b'data:{"choices":[{"delta":\ndata:{"content":"x"}}]}\n\n']))
    assert classes(out) == [api_events.CHUNK]


def test_ping_and_comments_are_not_chunks():
    out = parse([sse_head()] + chunked([b": keep-alive\n\n", b"event: ping\ndata: {}\n\n",
                                        b"id: 3\n\n", b"retry: 10\n\n", b"\n\n"]))
    assert classes(out) == [api_events.COMMENT, api_events.OTHER, api_events.OTHER, api_events.OTHER]


def test_an_event_left_unterminated_at_the_body_end_is_not_dispatched():
    out = parse([sse_head()] + chunked([b'data: {"choices":[{"delta":{"content":"x"}}]}\n']))
    assert classes(out) == [] and out[-1][0] == http1.RESPONSE_END


def test_many_events_in_one_read():
    evs = openai_events(tuple(f"w{i}" for i in range(500)))
    out = parse([b"".join([sse_head()] + chunked(evs))])
    assert classes(out).count(api_events.CHUNK) == 500


# --- HTTP framing -------------------------------------------------------------------------

def test_content_length_and_close_delimited_bodies():
    body = b"".join(openai_events(("a", "b")))
    cl = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body)
    out = parse([cl + body + sse_head()] + chunked(openai_events(("c",))))
    assert classes(out).count(api_events.CHUNK) == 3 and [m[0] for m in out].count(http1.RESPONSE_END) == 2
    close = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    d = http1.HttpDirection()
    out = []
    d.feed(close + body, 0, out)
    assert classes(out).count(api_events.CHUNK) == 2 and d.until_close


def test_headers_are_case_insensitive_and_interim_responses_skipped():
    head = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nCONTENT-TYPE:Text/Event-Stream\r\n"
            b"TRANSFER-ENCODING: Chunked\r\nX-Long: " + b"y" * 20000 + b"\r\n\r\n")
    out = parse([head] + chunked(openai_events(("a",))))
    assert [m[:3] for m in out if m[0] == http1.RESPONSE_HEAD] == [(http1.RESPONSE_HEAD, 200, True)]
    assert classes(out).count(api_events.CHUNK) == 1


def test_head_request_response_has_no_body():
    d = http1.HttpDirection()
    d.methods.append("HEAD")
    out: list = []
    d.feed(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 50\r\n\r\n",
           0, out)
    d.feed(sse_head() + b"".join(chunked(openai_events(("x",)))), 0, out)
    assert [m[0] for m in out].count(http1.RESPONSE_END) == 2 and classes(out).count(api_events.CHUNK) == 1


def test_request_model_and_stream_found_across_any_split_and_any_size():
    filler = "x" * 200_000
    body = json.dumps({"messages": [{"role": "user", "content": filler}], "model": "llama-3",
                       "stream": True}).encode()
    req = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    splits = [[req], [req[i:i + 4096] for i in range(0, len(req), 4096)],
              [req[:len(req) - 40]] + [req[i:i + 1] for i in range(len(req) - 40, len(req))]]
    for pieces in splits:
        out = parse(pieces)
        assert out[0][:3] == (http1.REQUEST_HEAD, "POST", http1.Route("openai", "chat"))
        assert out[-1][:3] == (http1.REQUEST_END, "llama-3", True)


def test_http2_preface_is_recognised_and_the_rest_handed_on():
    """The preface's first line ends HTTP/1.x; the bytes after it go, whole,
    to the HTTP/2 parser (pyxdp.streams.http2), and later ones are ignored here."""
    d = http1.HttpDirection()
    out: list = []
    rest = b"\r\nSM\r\n\r\n" + bytes(range(256)) * 10
    d.feed(b"PRI * HTTP/2.0\r\n" + rest, 0, out)
    assert out == [(http1.HTTP2, rest, None, None)] and d.skipped == 0
    d.feed(b"more", 0, out)
    assert len(out) == 1 and d.skipped == 4


def test_compressed_event_stream_is_counted_not_parsed():
    out = parse([sse_head(b"Content-Encoding: gzip\r\n")] + chunked([bytes(range(256))] * 4))
    assert out[0] == (http1.RESPONSE_HEAD, 200, True, True)
    assert events(out) == [] and out[-1][0] == http1.RESPONSE_END


def test_binary_garbage_and_tls_records_are_skipped_without_buffering():
    rng = random.Random(5)
    d = http1.HttpDirection()
    out: list = []
    for _ in range(200):
        d.feed(b"\x16\x03\x01" + rng.randbytes(1000), 0, out)
    assert out == [] and d.skipped == 200 * 1003 and len(d._line) == 0
    d.feed(sse_head() + b"".join(chunked(openai_events(("a",)))), 0, out)
    assert classes(out).count(api_events.CHUNK) == 1  # a message at a read's start is found again


def test_upgrade_ignores_the_rest():
    d = http1.HttpDirection()
    out: list = []
    d.feed(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n" + sse_head(), 0, out)
    assert [m[0] for m in out] == [http1.UPGRADE]


# --- lost bytes, huge events, bounds ------------------------------------------------------

def test_lost_bytes_inside_a_chunk_resync_at_the_next_event():
    evs = chunked(openai_events(tuple(f"w{i}" for i in range(10))))
    pieces = [sse_head()] + evs
    cut = pieces[4]
    pieces[4] = cut[:30]  # the capture kept 30 bytes of this write; the rest is lost
    lost = {5: len(cut) - 30}
    out = parse(pieces, lost)
    assert classes(out).count(api_events.CHUNK) == 9 and classes(out)[-1] == api_events.END
    assert out[-1][0] == http1.RESPONSE_END


def test_lost_bytes_spanning_chunk_framing_resync_at_a_chunk_size_line():
    evs = chunked(openai_events(tuple(f"w{i}" for i in range(10))))
    pieces = [sse_head()] + evs
    lost = {5: len(pieces[5]) + len(pieces[4]) - len(pieces[4]) // 2}
    pieces[4] = pieces[4][:len(pieces[4]) // 2]
    del pieces[5]
    d = http1.HttpDirection()
    out: list = []
    for i, p in enumerate(pieces):
        d.feed(p, lost.get(i, 0), out)
    assert classes(out).count(api_events.CHUNK) == 8 and classes(out)[-1] == api_events.END
    assert d.lost_bytes == lost[5] and d.resyncs >= 1


def test_unknown_loss_amounts_resync_too():
    evs = chunked(openai_events(tuple(f"w{i}" for i in range(10))))
    pieces = [sse_head()] + evs
    out = parse(pieces[:3] + pieces[5:], {3: 1})  # two writes lost, their size unknown
    assert classes(out).count(api_events.CHUNK) == 8 and classes(out)[-1] == api_events.END


def test_huge_event_is_capped_counted_and_classified_from_its_prefix():
    big = json.dumps({"model": "m", "choices": [{"delta": {"content": "z" * 1_000_000}}]}).encode()
    body = [b"data: " + big + b"\n\n"] + openai_events(("after",))
    d = http1.HttpDirection()
    out: list = []
    whole = b"".join([sse_head()] + chunked(body))
    peak = 0
    for i in range(0, len(whole), 65536):
        d.feed(whole[i:i + 65536], 0, out)
        sink = d._sink
        held = len(d._line) + (len(sink._line) + sink._dlen if isinstance(sink, sse_events.SseEvents) else 0)
        peak = max(peak, held)
    assert peak <= 2 * sse_events.BOUND + 64
    got = events(out)
    assert got[0][0] == api_events.CHUNK and got[0][4] & api_events.OVERSIZED
    assert classes(out).count(api_events.CHUNK) == 2 and classes(out)[-1] == api_events.END


def test_a_long_line_without_end_stays_bounded():
    d = http1.HttpDirection()
    out: list = []
    d.feed(sse_head() + b"ffffff\r\ndata: ", 0, out)
    for _ in range(1000):
        d.feed(b"q" * 1000, 0, out)
        assert len(d._sink._line) <= sse_events.BOUND


# --- any split, the same result -----------------------------------------------------------

_STREAM = b"".join([sse_head()] + chunked(
    openai_events(("one", " two", " three"), usage=3) + [b": c\r\n\r\n"] +
    [b"event: ping\r\ndata: {}\r\r"] + openai_events(("x",))))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(_STREAM) - 1), max_size=40))
def test_any_split_gives_the_same_result(cuts):
    cuts = sorted(set(cuts))
    pieces = [_STREAM[a:b] for a, b in zip([0] + cuts, cuts + [len(_STREAM)])]
    assert parse(pieces) == parse([_STREAM])


# --- privacy and cost ---------------------------------------------------------------------

def test_nothing_returned_or_raised_carries_content():
    secret = MARKER.encode()
    evs = openai_events((MARKER, MARKER), model="gpt") + [
        b"data: {\"" + secret + b"\n\n", b"event: " + secret + b"\ndata: " + secret + b"\n\n"]
    d = http1.HttpDirection()
    out: list = []
    for p in [request(content=MARKER), sse_head()] + chunked(evs, end=False):
        d.feed(p, 0, out)
    text = repr(out) + repr(d) + repr(d._sink) + json.dumps([list(m) for m in out], default=str)
    assert MARKER not in text


def test_hundred_thousand_events_and_the_cost_of_one(capsys):
    one = chunked(openai_events(("token",), done=False)[1:], end=False)[0]
    d = http1.HttpDirection()
    out: list = []
    d.feed(sse_head(), 0, out)
    out.clear()
    per = []
    for _ in range(5):  # 100,000 events; the best fifth's CPU time per event is printed
        t0 = time.thread_time()
        for _ in range(20_000):
            d.feed(one, 0, out)
        per.append((time.thread_time() - t0) / 20_000 * 1e9)
        assert len(out) == 20_000 and classes(out) == [api_events.CHUNK] * 20_000
        out.clear()
    d.feed(b"".join(chunked(openai_events(("a",)))), 0, out)
    assert classes(out)[-1] == api_events.END
    with capsys.disabled():
        print(f"\n  sse parse: {min(per):.0f} ns of CPU per event (one chunked OpenAI event "
              f"per read, {len(one)} bytes)")


def responses_events(words=("Hi", " there"), model="gpt-5", output_tokens=4) -> list[bytes]:
    """OpenAI's Responses API stream: typed events, no [DONE]."""
    def ev(name, obj):
        return f"event: {name}\ndata: {json.dumps({'type': name, **obj})}\n\n".encode()

    resp = {"id": "resp_1", "model": model, "status": "in_progress"}
    out = [ev("response.created", {"response": resp}),
           ev("response.output_item.added", {"item": {"type": "message"}})]
    out += [ev("response.output_text.delta", {"delta": w}) for w in words]
    out += [ev("response.output_text.done", {"text": "".join(words)}),
            ev("response.completed", {"response": {**resp, "status": "completed",
                                                   "usage": {"output_tokens": output_tokens}}})]
    return out


def test_openai_responses_api_events():
    out = parse([sse_head()] + chunked(responses_events(("a", "b", "c"), "gpt-5", 3)))
    got = events(out)
    assert [e[0] for e in got] == [api_events.OTHER] * 2 + [api_events.CHUNK] * 3 + [api_events.OTHER, api_events.END]
    assert {e[1] for e in got} == {"openai"} and got[0][2] == "gpt-5" and got[-1][3] == 3
    failed = b'event: response.failed\ndata: {"type":"response.failed","response":{}}\n\n'
    assert classes(parse([sse_head()] + chunked([failed]))) == [api_events.ERROR]


def test_an_event_of_a_million_data_lines_stays_bounded():
    s = sse_events.SseEvents()
    out: list = []
    for _ in range(100):
        s.feed(b"data: x\n" * 10_000, out)
        assert s._dlen <= sse_events.BOUND + 2 and len(s._data) <= sse_events.BOUND
    s.feed(b"\n", out)
    assert len(out) == 1 and out[0][1][4] & api_events.OVERSIZED
