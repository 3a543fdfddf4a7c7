# SPDX-License-Identifier: Apache-2.0
"""The token frame codec (docs/spec.md §1, and §4.1 for TCP).

A frame is a 4-byte big-endian payload length, one type byte, and the
payload. Over UDP one datagram carries whole frames back to back; over TCP a
stream is a sequence of frames, cut only by their length fields.
"""

import struct
from dataclasses import dataclass
from enum import IntEnum

HEADER = struct.Struct("!IB")
HEADER_LEN = HEADER.size  # 5; the C's ZL_FRAME_HDR_LEN (pyxdp.xdp.compiler.shared_defines)

DEFAULT_PORT = 9977
# The XDP walker's bound, shared with the C side: the loader passes it in as
# -DZL_MAX_FRAMES, so the program and pyxdp.proto.judge can never disagree.
MAX_FRAMES = 32
# Over TCP, a header announcing more than this breaks the stream.
DEFAULT_MAX_LENGTH = 1 << 20


# The C numbers the types as here (ZL_FRAME_<NAME>), 1..ZL_FRAME_TYPES.
class FrameType(IntEnum):
    REQUEST = 1
    TOKEN = 2
    DONE = 3
    PING = 4
    PONG = 5

    @property
    def label(self) -> str:
        """The lower-case name used in JSON and counters."""
        return self.name.lower()


FRAME_TYPES = tuple(FrameType)


class FrameError(ValueError):
    """Bytes that are not a valid frame sequence; REASON says why."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Frame:
    type: FrameType
    payload: bytes = b""

    def encode(self) -> bytes:
        return encode(self.type, self.payload)


def encode(frame_type: int, payload: bytes | str = b"") -> bytes:
    if isinstance(payload, str):
        payload = payload.encode()
    return HEADER.pack(len(payload), int(frame_type)) + payload


def encode_frames(frames) -> bytes:
    return b"".join(f.encode() for f in frames)


class StreamBroken(FrameError):
    """A TCP peer sent an invalid type or an oversize length: close the stream.
    FRAMES are the whole frames the same feed() completed before the break:
    they were valid and are the caller's to deliver."""

    def __init__(self, reason: str, message: str, frames: list["Frame"] | None = None):
        super().__init__(reason, message)
        self.frames = frames or []


class StreamDecoder:
    """Incremental decoder for a TCP stream of frames.

    feed() takes bytes as they arrive, in any split, and returns the frames
    they complete. A bad header raises StreamBroken as soon as its 5 bytes are
    in, without waiting for a payload that will never make sense.
    """

    def __init__(self, max_length: int = DEFAULT_MAX_LENGTH):
        self.max_length = max_length
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buf)

    @property
    def at_boundary(self) -> bool:
        """True when the stream could end here without losing part of a frame."""
        return not self._buf

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        off = 0
        buf = self._buf
        while len(buf) - off >= HEADER_LEN:
            length, ftype = HEADER.unpack_from(buf, off)
            if not 1 <= ftype <= len(FRAME_TYPES):
                raise StreamBroken("unknown_type", f"unknown frame type 0x{ftype:02x}", frames)
            if length > self.max_length:
                raise StreamBroken(
                    "oversize", f"frame length {length} exceeds {self.max_length}", frames
                )
            end = off + HEADER_LEN + length
            if end > len(buf):
                break
            frames.append(Frame(FrameType(ftype), bytes(buf[off + HEADER_LEN:end])))
            off = end
        del buf[:off]
        return frames
