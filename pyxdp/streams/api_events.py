# SPDX-License-Identifier: Apache-2.0
"""The OpenAI and Anthropic classification of one Server-Sent Event
(docs/spec.md §11.2): whether it carries generated output, ends the stream
or is an error, and the model and token count it names. Pure: bytes in, a
small tuple out, no I/O.

Privacy: it sees completions. Nothing it returns, no exception it lets out
and no repr carries content: only classes, model names (bounded, printable)
and counts.
"""

import json
import re

# Event classes: the first element of a classified event.
OTHER = 0    # an event that carries no generated output (role, usage, ping, start/stop of a block)
CHUNK = 1    # an event carrying generated output
END = 2      # the API's end of the stream: OpenAI's [DONE], Anthropic's message_stop
ERROR = 3    # an error event, or an error object in place of a chunk
GENERIC = 4  # an event with data of no known API (a chunk of an "sse" stream)
COMMENT = 5  # a block of comment lines only: not an event

# Flags, the last element of a classified event.
MALFORMED = 1  # the data should have been JSON and was not
OVERSIZED = 2  # the event was longer than BOUND: classified from its prefix

OPENAI, ANTHROPIC = "openai", "anthropic"
_ANTHROPIC_EVENTS = frozenset((b"message_start", b"content_block_start", b"content_block_delta",
                               b"content_block_stop", b"message_delta", b"message_stop", b"ping"))
_MODEL_MAX = 96
_TOKENS_MAX = 1 << 40
_last_model: tuple[str, str | None] = ("", None)  # a stream names one model in every chunk

_decode = json.JSONDecoder().raw_decode
# Prefix classification of an oversized event (the JSON cannot be decoded whole), and the
# Prefix classification of an oversized event (the JSON cannot be decoded whole), and the
# request body's model (pyxdp.streams.http1).
_OVER_CHUNK = re.compile(rb'"(?:content|reasoning_content|text)"\s*:\s*"[^"]'
                         rb'|"tool_calls"\s*:\s*\[\s*\{')
MODEL_FIELD = re.compile(rb'"model"\s*:\s*"([^"\\]{1,96})"')


def model_name(value) -> str | None:
    """A model name fit to leave the process: printable ASCII, bounded."""
    if type(value) is not str:
        return None
    global _last_model
    if value == _last_model[0]:
        return _last_model[1]
    if len(value) <= _MODEL_MAX and value.isascii() and value.isprintable() and " " not in value:
        _last_model = (value, value or None)  # the usual case, without a loop in Python
        return value or None
    name = "".join(ch for ch in value[:_MODEL_MAX] if " " < ch < "\x7f")
    return name or None


def _tokens(value) -> int | None:
    if type(value) is int and 0 <= value < _TOKENS_MAX:
        return value
    return None


def classify(etype: bytes | None, data: bytes, flags: int = 0) -> tuple:
    """One SSE event as (class, api, model, tokens, flags). api is OPENAI,
    ANTHROPIC or None (not recognised); model and tokens are None unless the
    event names them."""
    if flags & OVERSIZED:
        return _classify_prefix(etype, data, flags)
    if etype is not None and etype != b"message":
        if etype in _ANTHROPIC_EVENTS:
            return _typed(ANTHROPIC, _anthropic_obj, etype, data, flags)
        if etype == b"error":
            return (ERROR, None, None, None, flags)
        if etype[:9] == b"response.":
            return _typed(OPENAI, _responses_obj, etype, data, flags)  # the Responses API
    if data[:6] == b"[DONE]" and data.strip() == b"[DONE]":
        return (END, OPENAI, None, None, flags)
    if not data:
        return (OTHER, None, None, None, flags)
    try:
        text = data.decode()
        if text[0] in " \t\n":
            text = text.lstrip()
        obj, end = _decode(text)
        if end != len(text) and text[end:].strip():
            raise ValueError("trailing bytes")
    except (ValueError, UnicodeDecodeError, IndexError):
        head = data.lstrip()[:1]
        return (OTHER if head in (b"{", b"[") else GENERIC, None, None, None,
                flags | MALFORMED if head in (b"{", b"[") else flags)
    if type(obj) is not dict:
        return (GENERIC, None, None, None, flags)
    choices = obj.get("choices")
    if type(choices) is list:
        return _openai(obj, choices, flags)
    if "error" in obj:
        return (ERROR, None, None, None, flags)
    kind = obj.get("type")
    if type(kind) is str:
        if kind.encode() in _ANTHROPIC_EVENTS:
            return _anthropic_obj(kind.encode(), obj, flags)
        if kind[:9] == "response.":
            return _responses_obj(kind.encode(), obj, flags)
    return (GENERIC, None, None, None, flags)


def _openai(obj: dict, choices: list, flags: int) -> tuple:
    cls = OTHER
    for choice in choices:
        if type(choice) is dict:
            delta = choice.get("delta")
            if type(delta) is dict:
                if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                    cls = CHUNK
                    break
            elif choice.get("text"):  # the legacy completions API
                cls = CHUNK
                break
    usage = obj.get("usage")
    tokens = _tokens(usage.get("completion_tokens")) if type(usage) is dict else None
    return (cls, OPENAI, model_name(obj.get("model")), tokens, flags)


def _typed(api: str, classify, etype: bytes, data: bytes, flags: int) -> tuple:
    """A typed event's data decoded, then CLASSIFY(etype, obj, flags); data
    that is not a JSON object is a malformed event of API."""
    try:
        obj, _ = _decode(data.decode().lstrip())
    except (ValueError, UnicodeDecodeError):
        return (OTHER, api, None, None, flags | MALFORMED)
    if type(obj) is not dict:
        return (OTHER, api, None, None, flags | MALFORMED)
    return classify(etype, obj, flags)


def _responses_obj(etype: bytes, obj: dict, flags: int) -> tuple:
    if etype[-6:] == b".delta":  # output_text, reasoning_text, function_call_arguments, refusal...
        return (CHUNK if obj.get("delta") else OTHER, OPENAI, None, None, flags)
    cls = (END if etype in (b"response.completed", b"response.incomplete") else
           ERROR if etype == b"response.failed" else OTHER)
    resp = obj.get("response")
    if type(resp) is not dict:
        return (cls, OPENAI, None, None, flags)
    usage = resp.get("usage")
    tokens = _tokens(usage.get("output_tokens")) if type(usage) is dict else None
    return (cls, OPENAI, model_name(resp.get("model")), tokens, flags)


def _anthropic_obj(etype: bytes, obj: dict, flags: int) -> tuple:
    if etype == b"content_block_delta":
        return (CHUNK, ANTHROPIC, None, None, flags)
    if etype == b"message_stop":
        return (END, ANTHROPIC, None, None, flags)
    if etype == b"message_start":
        msg = obj.get("message")
        return (OTHER, ANTHROPIC, model_name(msg.get("model")) if type(msg) is dict else None,
                None, flags)
    if etype == b"message_delta":
        usage = obj.get("usage")
        tokens = _tokens(usage.get("output_tokens")) if type(usage) is dict else None
        return (OTHER, ANTHROPIC, None, tokens, flags)
    return (OTHER, ANTHROPIC, None, None, flags)


def _classify_prefix(etype: bytes | None, data: bytes, flags: int) -> tuple:
    """An event too long to buffer whole, judged from its first BOUND bytes."""
    if etype in _ANTHROPIC_EVENTS:
        cls = CHUNK if etype == b"content_block_delta" else \
            END if etype == b"message_stop" else OTHER
        return (cls, ANTHROPIC, None, None, flags)
    if etype == b"error":
        return (ERROR, None, None, None, flags)
    if etype is not None and etype[:9] == b"response.":
        return (CHUNK if etype[-6:] == b".delta" else OTHER, OPENAI, None, None, flags)
    if b'"choices"' in data:
        found = MODEL_FIELD.search(data)
        model = model_name(found.group(1).decode("ascii", "replace")) if found else None
        return (CHUNK if _OVER_CHUNK.search(data) else OTHER, OPENAI, model, None, flags)
    if b'"type":"content_block_delta"' in data or b'"type": "content_block_delta"' in data:
        return (CHUNK, ANTHROPIC, None, None, flags)
    return (GENERIC, None, None, None, flags)
