# SPDX-License-Identifier: Apache-2.0
"""A token datagram (a UDP payload of frames), judged by the reference judge
and then decoded: the frames, or FrameError naming the malformed reason."""

from pyxdp.proto.frames import HEADER, HEADER_LEN, MAX_FRAMES, Frame, FrameError, FrameType
from pyxdp.proto.judge import judge_datagram


def decode_datagram(payload: bytes, max_frames: int = MAX_FRAMES) -> list[Frame]:
    """The frames of a token datagram; FrameError names the malformed reason."""
    verdict = judge_datagram(payload, max_frames)
    if verdict.reason is not None:
        raise FrameError(verdict.reason, f"malformed datagram: {verdict.reason}")
    frames: list[Frame] = []
    off = 0
    while off < len(payload):
        length, ftype = HEADER.unpack_from(payload, off)
        start = off + HEADER_LEN
        frames.append(Frame(FrameType(ftype), payload[start:start + length]))
        off = start + length
    return frames
