# SPDX-License-Identifier: Apache-2.0
"""The delivery bench's tiers of work per frame on the UDP side, on real
loopback sockets (any user): each walks every frame of every datagram, the
act tier builds one stream per source with exactly the TOKEN texts sent, and
no drain takes more datagrams than it is allowed. (pyxdp's side runs on a
lab, in test_bench_delivery.py.)"""

import socket

import pytest

from pyxdp.bench.delivery import tiers
from pyxdp.proto import frames
from pyxdp.proto.frames import FrameType

CONVERSATION = [
    frames.encode(FrameType.REQUEST, b'{"prompt": "sky"}') + frames.encode(FrameType.TOKEN, "The"),
    frames.encode(FrameType.TOKEN, " sky") + frames.encode(FrameType.TOKEN, " is")
    + frames.encode(FrameType.TOKEN, " blue ✓"),
    frames.encode(FrameType.TOKEN, b"") * frames.MAX_FRAMES,
    frames.encode(FrameType.PING) + frames.encode(FrameType.DONE, b"{}"),
]
FRAMES_SENT = 2 + 3 + frames.MAX_FRAMES + 2


@pytest.fixture
def receiver():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    yield sock
    sock.close()


def _send(receiver, datagrams, senders=1) -> list[tuple[str, int]]:
    """Each sender sends every datagram; returns the senders' addresses."""
    out = []
    for _ in range(senders):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            for d in datagrams:
                s.sendto(d, receiver.getsockname())
            out.append(s.getsockname())
    return out


def _drain(drain, receiver, limit=1000) -> tuple[int, tiers.Tally]:
    tally = tiers.Tally()
    return drain(receiver, bytearray(2048), limit, tally), tally


def test_count_reads_datagrams_and_walks_nothing(receiver):
    _send(receiver, CONVERSATION)
    got, tally = _drain(tiers.udp_count, receiver)
    assert got == len(CONVERSATION) and tally.walked == 0 and not tally.streams


def test_touch_walks_every_frame_of_every_datagram(receiver):
    _send(receiver, CONVERSATION)
    got, tally = _drain(tiers.udp_touch, receiver)
    assert got == len(CONVERSATION)
    assert tally.walked == FRAMES_SENT and tally.tokens == 0


def test_act_appends_each_token_to_its_sources_stream(receiver):
    sources = _send(receiver, CONVERSATION, senders=2)
    got, tally = _drain(tiers.udp_act, receiver)
    assert got == 2 * len(CONVERSATION) and tally.walked == 2 * FRAMES_SENT
    assert sorted(tally.streams) == sorted(sources)
    for texts in tally.streams.values():
        assert "".join(texts) == "The sky is blue ✓"
        assert len(texts) == 4 + frames.MAX_FRAMES  # the empty tokens too
    assert tally.to_json() == {"frames_walked": 2 * FRAMES_SENT, "flows": 2,
                               "tokens_appended": 2 * (4 + frames.MAX_FRAMES)}


@pytest.mark.parametrize("drain", [tiers.udp_count, tiers.udp_touch, tiers.udp_act])
def test_a_drain_takes_no_more_than_its_limit(receiver, drain):
    _send(receiver, CONVERSATION)
    first, _ = _drain(drain, receiver, limit=3)
    rest, _ = _drain(drain, receiver)
    empty, _ = _drain(drain, receiver)
    assert (first, rest, empty) == (3, len(CONVERSATION) - 3, 0)
