# SPDX-License-Identifier: Apache-2.0
"""The work a consumer of the delivery bench does per frame, in the three
tiers of TIERS, written once for the UDP socket and once for
pyxdp so that both sides of a ratio do the same work:

  count  nothing per frame: the AF_XDP consumer counts descriptors, the UDP
         consumer receives each datagram into one buffer (recv_into), which
         the socket API cannot avoid;
  touch  every frame's type and payload reach Python as objects: a FrameType
         and a zero-copy memoryview of the payload (UDP: recv_into, then a
         struct.unpack_from walk over the datagram; pyxdp: Batch.frames());
  act    touch, and each TOKEN frame's text appended to its flow's stream, a
         dict of lists keyed by the datagram's source address and port
         (UDP: the (host, port) recvfrom_into returns; pyxdp: the
         "host:port" Batch.sources() gives, one per datagram).

A UDP `drain` receives up to LIMIT datagrams, stopping early when the socket
is empty, and returns how many it got; an AF_XDP `work` function does its
tier on one batch. Both add the frames they walked (and the tokens they
appended) to a Tally, which the bench checks against what was received: a
tier that skipped frames would not be measuring its work. The loops are
written out per tier, with no call per frame, so that neither side pays for
an abstraction the other does not.
"""

import socket
from collections import defaultdict
from dataclasses import dataclass, field

from pyxdp.proto.frames import HEADER, HEADER_LEN, FrameType

TIERS = ("count", "touch", "act")
TIER_WORK = {
    "count": "count datagrams, read no byte of a frame (UDP: recv_into)",
    "touch": "each frame's type and payload as Python objects (FrameType, memoryview)",
    "act": "touch, and each TOKEN frame's text appended to its flow's stream",
}

TOKEN = FrameType.TOKEN
# Index = the type byte. zerolayer redirects (and, with no AF_XDP socket, the
# kernel delivers) only valid token datagrams, so every byte found is 1..5.
_TYPES: tuple = (None, *FrameType)
_DONTWAIT = socket.MSG_DONTWAIT


@dataclass
class Tally:
    """What a consumer's tier did: frames walked, and in the act tier the
    streams it built (flow key -> list of token texts)."""

    walked: int = 0
    streams: defaultdict = field(default_factory=lambda: defaultdict(list))

    @property
    def tokens(self) -> int:
        return sum(len(texts) for texts in self.streams.values())

    def to_json(self) -> dict:
        return {"frames_walked": self.walked, "flows": len(self.streams),
                "tokens_appended": self.tokens}


# --- the UDP socket -----------------------------------------------------------------

def udp_count(sock: socket.socket, buf: bytearray, limit: int, tally: Tally) -> int:
    recv_into = sock.recv_into
    got = 0
    try:
        while got < limit:
            recv_into(buf, 0, _DONTWAIT)
            got += 1
    except BlockingIOError:
        pass
    return got


def udp_touch(sock: socket.socket, buf: bytearray, limit: int, tally: Tally) -> int:
    recv_into, unpack_from, view, types = sock.recv_into, HEADER.unpack_from, memoryview(buf), _TYPES
    got = walked = 0
    try:
        while got < limit:
            n = recv_into(buf, 0, _DONTWAIT)
            off = 0
            while off < n:
                length, t = unpack_from(buf, off)
                start = off + HEADER_LEN
                off = start + length
                _ftype, _payload = types[t], view[start:off]
                walked += 1
            got += 1
    except BlockingIOError:
        pass
    tally.walked += walked
    return got


def udp_act(sock: socket.socket, buf: bytearray, limit: int, tally: Tally) -> int:
    recvfrom_into, unpack_from, view, types = (sock.recvfrom_into, HEADER.unpack_from,
                                               memoryview(buf), _TYPES)
    streams = tally.streams
    got = walked = 0
    try:
        while got < limit:
            n, source = recvfrom_into(buf, 0, _DONTWAIT)
            off = 0
            while off < n:
                length, t = unpack_from(buf, off)
                start = off + HEADER_LEN
                off = start + length
                ftype, payload = types[t], view[start:off]
                walked += 1
                if ftype is TOKEN:
                    streams[source].append(str(payload, "utf-8"))
            got += 1
    except BlockingIOError:
        pass
    tally.walked += walked
    return got


UDP_DRAINS = {"count": udp_count, "touch": udp_touch, "act": udp_act}


# --- pyxdp --------------------------------------------------------------------------

def xsk_count(batch, tally: Tally) -> None:
    pass  # the consumer counts the batch's descriptors


def xsk_touch(batch, tally: Tally) -> None:
    walked = 0
    for _ftype, _payload in batch.frames():
        walked += 1
    tally.walked += walked


def xsk_act(batch, tally: Tally) -> None:
    arrays = batch.frames()
    sources = batch.sources()
    streams = tally.streams
    walked = 0
    for d, (ftype, payload) in zip(arrays.datagram.tolist(), arrays):
        walked += 1
        if ftype is TOKEN:
            streams[sources[d]].append(str(payload, "utf-8"))
    tally.walked += walked


XSK_WORK = {"count": xsk_count, "touch": xsk_touch, "act": xsk_act}

