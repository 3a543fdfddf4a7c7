# SPDX-License-Identifier: Apache-2.0
"""The codec and the reference judge, in plain Python."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyxdp.proto import datagram, frames, judge
from pyxdp.proto.frames import Frame, FrameType

frame_strategy = st.builds(
    Frame, st.sampled_from(list(FrameType)), st.binary(max_size=40)
)


def test_encode_is_length_type_payload():
    assert frames.encode(FrameType.TOKEN, "hi") == b"\x00\x00\x00\x02\x02hi"
    assert frames.encode(FrameType.PING) == b"\x00\x00\x00\x00\x04"


@given(st.lists(frame_strategy, min_size=1, max_size=frames.MAX_FRAMES))
def test_datagram_roundtrip(items):
    wire = frames.encode_frames(items)
    assert datagram.decode_datagram(wire) == items
    verdict = judge.judge_datagram(wire)
    assert verdict.valid
    assert sum(verdict.frames) == len(items)
    assert verdict.payload_bytes == sum(len(f.payload) for f in items)


@settings(max_examples=200)
@given(st.lists(frame_strategy, max_size=20), st.data())
def test_stream_decoder_is_split_invariant(items, data):
    wire = frames.encode_frames(items)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=8)))
    decoder, got, prev = frames.StreamDecoder(), [], 0
    for cut in cuts + [len(wire)]:
        got += decoder.feed(wire[prev:cut])
        prev = cut
    assert got == items
    assert decoder.at_boundary


def test_stream_decoder_every_byte_offset():
    wire = frames.encode_frames([Frame(FrameType.REQUEST, b"{}"), Frame(FrameType.TOKEN, b"abc")])
    for cut in range(len(wire) + 1):
        d = frames.StreamDecoder()
        got = d.feed(wire[:cut]) + d.feed(wire[cut:])
        assert [f.payload for f in got] == [b"{}", b"abc"]


def test_stream_decoder_holds_partial_frame():
    d = frames.StreamDecoder()
    assert d.feed(b"\x00\x00\x00\x05\x02he") == []
    assert d.pending == 7 and not d.at_boundary


def test_stream_decoder_breaks_on_bad_type_before_payload_arrives():
    with pytest.raises(frames.StreamBroken) as err:
        frames.StreamDecoder().feed(b"\x00\x00\x00\x10\x09")
    assert err.value.reason == "unknown_type"


def test_stream_decoder_breaks_on_oversize_length():
    d = frames.StreamDecoder(max_length=100)
    with pytest.raises(frames.StreamBroken) as err:
        d.feed(frames.HEADER.pack(101, FrameType.TOKEN))
    assert err.value.reason == "oversize"


@pytest.mark.parametrize("payload, reason", [
    (b"", "short_header"),
    (b"\x00\x00\x00", "short_header"),
    (frames.encode(FrameType.TOKEN, "ok") + b"\x00", "short_header"),
    (frames.HEADER.pack(10, FrameType.TOKEN) + b"abc", "truncated"),
    (frames.HEADER.pack(0xFFFFFFFF, FrameType.TOKEN), "truncated"),
    (frames.HEADER.pack(0, 0), "unknown_type"),
    (frames.HEADER.pack(0, 6), "unknown_type"),
    # one header both unknown and truncated: the type is judged first
    (frames.HEADER.pack(1000, 0xFF), "unknown_type"),
    (frames.encode(FrameType.PING) * (frames.MAX_FRAMES + 1), "too_many_frames"),
    # the limit is met before a short tail would be
    (frames.encode(FrameType.PING) * frames.MAX_FRAMES + b"\x00", "too_many_frames"),
])
def test_judge_reasons(payload, reason):
    assert judge.judge_datagram(payload).reason == reason
    with pytest.raises(frames.FrameError):
        datagram.decode_datagram(payload)


def test_judge_first_reason_wins():
    bad_type = frames.HEADER.pack(0, 9)
    truncated = frames.HEADER.pack(50, FrameType.TOKEN)
    assert judge.judge_datagram(frames.encode(FrameType.TOKEN, "a") + bad_type + truncated).reason \
        == "unknown_type"
    assert judge.judge_datagram(frames.encode(FrameType.TOKEN, "a") + truncated + bad_type).reason \
        == "truncated"


def test_judge_counts_by_type_and_bytes():
    wire = frames.encode_frames([
        Frame(FrameType.REQUEST, b'{"p":1}'), Frame(FrameType.TOKEN, b"a"),
        Frame(FrameType.TOKEN, b"bc"), Frame(FrameType.DONE), Frame(FrameType.PING),
        Frame(FrameType.PONG),
    ])
    verdict = judge.judge_datagram(wire)
    assert verdict.frames == (1, 2, 1, 1, 1)
    assert verdict.payload_bytes == 10


def test_exactly_max_frames_is_valid():
    assert judge.judge_datagram(frames.encode(FrameType.TOKEN, "x") * frames.MAX_FRAMES).valid


def test_random_bytes_never_crash_the_judge():
    rng = random.Random(1)
    for _ in range(2000):
        blob = rng.randbytes(rng.randrange(0, 64))
        verdict = judge.judge_datagram(blob)
        assert verdict.valid or verdict.reason in ("short_header", "truncated", "unknown_type",
                                                   "too_many_frames")


def test_stream_broken_keeps_the_frames_before_the_break():
    good = frames.encode_frames([Frame(FrameType.TOKEN, b"a"), Frame(FrameType.DONE)])
    d = frames.StreamDecoder()
    assert d.feed(good[:3]) == []
    with pytest.raises(frames.StreamBroken) as err:
        d.feed(good[3:] + frames.HEADER.pack(0, 0x42))
    assert err.value.frames == [Frame(FrameType.TOKEN, b"a"), Frame(FrameType.DONE)]
