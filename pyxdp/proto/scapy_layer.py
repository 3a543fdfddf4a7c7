# SPDX-License-Identifier: Apache-2.0
"""The token frame as a scapy layer, so tests, pcaps and `sniff()` dissect
token traffic the way scapy users expect:

    >>> from pyxdp.proto.scapy_layer import TokenFrame
    >>> pkt = IP()/UDP(dport=9977)/TokenFrame(type="TOKEN", data=b"hi")/TokenFrame(type="DONE")

Frames chain: what follows one frame's payload is dissected as the next
frame. Bound to UDP port 9977 in both directions.
"""

from scapy.fields import ByteEnumField, FieldLenField, StrLenField
from scapy.layers.inet import UDP
from scapy.packet import Packet, Padding, bind_layers

from pyxdp.proto.frames import DEFAULT_PORT, HEADER_LEN, FrameType

TYPE_NAMES = {t.value: t.name for t in FrameType}


class TokenFrame(Packet):
    name = "TokenFrame"
    fields_desc = [
        FieldLenField("length", None, length_of="data", fmt="!I"),
        ByteEnumField("type", FrameType.TOKEN.value, TYPE_NAMES),
        StrLenField("data", b"", length_from=lambda pkt: pkt.length),
    ]

    def guess_payload_class(self, payload: bytes):
        # Another whole header follows: another frame. Anything shorter is
        # left as padding (the datagram is then malformed).
        return TokenFrame if len(payload) >= HEADER_LEN else Padding

    def mysummary(self):
        return self.sprintf("TokenFrame %type% len=%length%")


bind_layers(UDP, TokenFrame, dport=DEFAULT_PORT)
bind_layers(UDP, TokenFrame, sport=DEFAULT_PORT)
