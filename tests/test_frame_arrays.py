# SPDX-License-Identifier: Apache-2.0
"""The batch-wide frame walk (pyxdp.xsk.frame_arrays) on synthetic UMEM:
packets laid out as the kernel lays them in chunks, walked by Batch.frames()
and held to the reference decoder and judge, datagram by datagram. The same
walk on real AF_XDP sockets is tests/test_xsk_frames.py. Every test runs on
both cores (tests/support/core_fixtures.py); tests/test_core_agreement.py holds
them to each other on arbitrary bytes, where no reference judge answers."""

import random

import numpy as np
import pytest

from pyxdp.proto import datagram, frames, judge
from pyxdp.proto.frames import MAX_FRAMES, FrameType
from pyxdp.xsk.batch import Batch
from support.packets import build, random_token_packet, random_token_payload, token_frames
from support.synthetic_umem import CHUNK, SyntheticUmem, batch_of

pytestmark = pytest.mark.usefixtures("each_core")

SRC4, DST4 = "198.18.0.2", "198.18.0.1"
SRC6, DST6 = "fd00:7a1::2", "fd00:7a1::1"


def udp_payload(pkt: bytes) -> bytes:
    return judge.classify_packet(pkt).payload


def endpoints_of(family: int) -> tuple[str, str]:
    """Source and destination of a tests/support/packets.py datagram."""
    if family == 4:
        return f"{SRC4}:40000", f"{DST4}:{frames.DEFAULT_PORT}"
    return f"[{SRC6}]:40000", f"[{DST6}]:{frames.DEFAULT_PORT}"


def assert_matches_reference(batch: Batch, packets: list[bytes]) -> None:
    """Batch.frames() is decode_datagram() of every datagram, in order, and
    leaves out exactly the datagrams the judge calls malformed."""
    arrays = batch.frames()
    payloads = [udp_payload(p) for p in packets]
    valid = [judge.judge_datagram(p).valid for p in payloads]
    assert arrays.broken.tolist() == [i for i, ok in enumerate(valid) if not ok]
    want = [(i, f.type, f.payload) for i, p in enumerate(payloads) if valid[i]
            for f in datagram.decode_datagram(p)]
    got = [(int(d), ftype, bytes(view))
           for d, (ftype, view) in zip(arrays.datagram, arrays)]
    assert got == want
    assert len(arrays) == len(want)
    assert [bytes(arrays.payload(j)) for j in range(len(arrays))] == [w[2] for w in want]
    assert arrays.type.tolist() == [int(w[1]) for w in want]
    # offset is absolute in UMEM, length the payload's
    for j in range(len(arrays)):
        start, n = int(arrays.offset[j]), int(arrays.length[j])
        assert batch.umem[start:start + n].tobytes() == want[j][2]


@pytest.mark.parametrize("seed", range(6))
def test_random_valid_batches_match_the_reference_decoder(seed):
    rng = random.Random(seed)
    families = [rng.choice([4, 6]) for _ in range(rng.choice([1, 7, 64, 300]))]
    packets = [random_token_packet(rng, random_token_payload(rng), f) for f in families]
    batch = batch_of(packets, rng)
    assert_matches_reference(batch, packets)
    assert not len(batch.frames().broken)
    assert batch.sources() == [endpoints_of(f)[0] for f in families]
    assert batch.destinations() == [endpoints_of(f)[1] for f in families]
    assert batch.sources() == [batch.source(i) for i in range(len(batch))]


def test_hostile_but_valid_shapes():
    """Valid datagrams shaped to trip a walker: the frame budget exactly,
    empty frames only, a payload that fills the chunk, payload bytes that
    look like headers, padding after a tiny datagram, every walk length in
    one batch, and a packet that ends at the last byte of the UMEM."""
    fake_header = frames.HEADER.pack(3, FrameType.DONE)  # inside a payload, not a header
    shapes = [
        frames.encode(FrameType.TOKEN, b"t") * MAX_FRAMES,
        frames.encode(FrameType.PING) * MAX_FRAMES,
        frames.encode(FrameType.PONG),  # 5 bytes, padded to 60 on the wire
        frames.encode(FrameType.TOKEN, fake_header * 50),
        frames.encode(FrameType.REQUEST, b"\x00" * 5) + frames.encode(FrameType.DONE),
        frames.encode(FrameType.TOKEN, b"x" * 1450),  # a full 1500-byte MTU
        *[token_frames(*[("token", f"{k}")] * k) for k in range(1, MAX_FRAMES + 1)],
    ]
    packets = [build(p, pad_to=60) for p in shapes]
    packets += [build(p, family=6, vlans=(0x88A8, 0x8100)) for p in shapes]
    assert_matches_reference(batch_of(packets), packets)
    # the last packet flush against the end of UMEM: no read may go past it
    tail = build(frames.encode(FrameType.DONE, b"end"))
    umem = SyntheticUmem(2)
    addr = np.array([2 * CHUNK - len(tail)], np.uint64)
    umem.umem[-len(tail):] = np.frombuffer(tail, np.uint8)
    flush = Batch(umem, addr, np.array([len(tail)], np.uint32))
    assert [(t, bytes(p)) for t, p in flush.frames()] == [(FrameType.DONE, b"end")]


def test_malformed_datagrams_are_left_out_and_counted():
    """The program never redirects these; if one came, the walk must not hand
    out views past the datagram. Each is judged broken exactly when the
    reference judge calls it malformed, and its neighbours are unharmed."""
    rng = random.Random(11)
    good = frames.encode(FrameType.TOKEN, "ok")
    bad = [
        b"",  # empty UDP payload
        good + b"\x00\x00",  # short_header
        frames.HEADER.pack(100, FrameType.TOKEN) + b"short",  # truncated
        frames.HEADER.pack(0xFFFFFFFF, FrameType.TOKEN) + b"x",  # a length past any int32
        good + frames.HEADER.pack(1, 0) + b"?",  # unknown type 0
        frames.HEADER.pack(0, 6),  # unknown type 6
        frames.HEADER.pack(0, 0xFF),
        frames.encode(FrameType.PING) * (MAX_FRAMES + 1),  # too_many_frames
        frames.encode(FrameType.PING) * MAX_FRAMES + b"\x00",
    ]
    for _ in range(200):  # random mutations of valid datagrams
        raw = bytearray(random_token_payload(rng, 300))
        for _ in range(rng.randint(1, 3)):
            raw[rng.randrange(len(raw))] = rng.getrandbits(8)
        bad.append(bytes(raw[:rng.randint(0, len(raw))] if rng.random() < 0.3 else raw))
    payloads = [p for b in bad for p in (good, b)]
    packets = [build(p) for p in payloads]
    assert_matches_reference(batch_of(packets, rng), packets)
    assert len(batch_of(packets).frames().broken) >= 9
    # A header cut short by the very end of UMEM: read without going past it.
    for stray in range(1, frames.HEADER_LEN):
        pkt = build(good + b"\x00" * stray)
        umem = SyntheticUmem(1)
        umem.umem[-len(pkt):] = np.frombuffer(pkt, np.uint8)
        flush = Batch(umem, np.array([CHUNK - len(pkt)], np.uint64),
                      np.array([len(pkt)], np.uint32))
        assert flush.frames().broken.tolist() == [0] and len(flush.frames()) == 0


def test_an_empty_batch_has_empty_arrays():
    arrays = batch_of([]).frames()
    assert len(arrays) == 0 and list(arrays) == []
    assert arrays.datagram.size == arrays.type.size == arrays.offset.size == 0


def test_frames_are_computed_once_and_are_views_into_umem():
    packets = [build(token_frames(("token", "a"), ("done", "")))] * 3
    batch = batch_of(packets)
    arrays = batch.frames()
    assert batch.frames() is arrays
    views = [view for _, view in arrays]
    assert all(np.shares_memory(np.frombuffer(v, np.uint8), batch.umem) for v in views if len(v))
    assert arrays.datagram.tolist() == [0, 0, 1, 1, 2, 2]
    cut = arrays.head(3)
    assert len(cut) == 3 and cut.datagram.tolist() == [0, 0, 1]
    assert [(t, bytes(p)) for t, p in cut] == [(FrameType.TOKEN, b"a"), (FrameType.DONE, b""),
                                               (FrameType.TOKEN, b"a")]

