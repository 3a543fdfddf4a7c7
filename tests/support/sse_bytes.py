# SPDX-License-Identifier: Apache-2.0
"""HTTP/1.1 and Server-Sent Event bytes for the tests of pyxdp.streams.http1,
the stream tracker and its metrics: recorded streams
(tests/fixtures/streams), OpenAI and Anthropic events, chunked framing,
and a whole stream fed to a tracker."""

import base64
import json
import pathlib

MS = 1_000_000
FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "streams"
MARKER = "zlmarker-7f3c9a1e"  # a unique string in content: must never come out


def recorded(name: str) -> dict:
    """A recorded exchange: {"sdk": ..., "connections": [[(t_ns, tag, bytes), ...], ...]}."""
    d = json.loads((FIXTURES / f"{name}.json").read_text())
    d["connections"] = [[(t, tag, base64.b64decode(b)) for t, tag, b in c]
                        for c in d["connections"]]
    return d


def openai_events(words=("Hello", " world"), model="gpt-4o-mini", usage=None, done=True,
                  sep=b"\n\n") -> list[bytes]:
    def ev(delta, **extra):
        obj = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": None}], **extra}
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + sep

    out = [ev({"role": "assistant", "content": ""})]
    out += [ev({"content": w}) for w in words]
    if usage is not None:
        out.append(b"data: " + json.dumps({"id": "chatcmpl-x", "model": model, "choices": [],
                                           "usage": {"completion_tokens": usage}}).encode() + sep)
    if done:
        out.append(b"data: [DONE]" + sep)
    return out


def anthropic_events(words=("Hello", " world"), model="claude-x", output_tokens=7) -> list[bytes]:
    def ev(name, obj):
        return f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode()

    out = [ev("message_start", {"type": "message_start",
                                "message": {"model": model, "content": [], "usage": {}}}),
           ev("content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "text", "text": ""}}),
           ev("ping", {"type": "ping"})]
    out += [ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": w}}) for w in words]
    out += [ev("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                 "usage": {"output_tokens": output_tokens}}),
            ev("message_stop", {"type": "message_stop"})]
    return out


def chunked(parts: list[bytes], end: bool = True) -> list[bytes]:
    """Each part as one HTTP chunk (as servers write them), and the terminator."""
    out = [b"%x\r\n" % len(p) + p + b"\r\n" for p in parts]
    return out + [b"0\r\n\r\n"] if end else out


def sse_head(extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
            b"Transfer-Encoding: chunked\r\n" + extra + b"\r\n")


def request(model: str = "gpt-4o-mini", path: bytes = b"/v1/chat/completions",
            content: str = "hello", stream: bool = True) -> bytes:
    body = json.dumps({"messages": [{"role": "user", "content": content}], "model": model,
                       "stream": stream}).encode()
    return (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body)


def stream(tr, conn, events, t=0, step=20 * MS, side="client", req=None, head=None, end=True):
    """A request and its event stream, one event per write, STEP apart; returns the time."""
    out = side == "client"
    tr.data(conn, out, req or request(), t)
    t += 5 * MS
    tr.data(conn, not out, head or sse_head(), t)
    for p in chunked(events, end=end):
        t += step
        tr.data(conn, not out, p, t)
    return t
