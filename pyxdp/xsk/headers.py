# SPDX-License-Identifier: Apache-2.0
"""The Ethernet, IPv4 or IPv6, and UDP headers of datagrams sent over
AF_XDP, written into UMEM a batch at a time.

A Template holds every header byte that is the same for all datagrams to
one destination (MACs, addresses, ports, TTL, DF), with the fields that
vary per datagram left zero: IPv4's total length and header checksum,
IPv6's payload length, UDP's length and checksum. write() fills those for a
whole batch with numpy and writes each datagram's headers in front of its
payload, so no Python runs per datagram.

Checksums are one's-complement sums of 16-bit big-endian words (RFC 1071).
A sum is linear, so each is the template's constant part (addresses,
ports, protocol: summed once per destination) plus what varies: the
length, once in the IPv4 header; twice in the UDP checksum (in the
pseudo-header and in the UDP header, RFC 768, RFC 8200 §8.1), and the
payload's words, summed for all datagrams at once (payload_sums). The UDP
checksum is always computed (IPv6 requires it; over IPv4 the receiver
checks it too when it is not zero), and a result of 0 is sent as 0xFFFF.

send_batch() is what TokenSender calls: payloads copied into their chunks,
then write(), on the pure path; on the compiled core (pyxdp/xsk/core.py)
one C call does both, a datagram at a time.
"""

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pyxdp.proto.ethernet import ETH_HLEN, ETH_P_IP, ETH_P_IPV6
from pyxdp.proto.judge import IPPROTO_UDP
from pyxdp.xsk import core
from pyxdp.xsk.batch import IPV6_HLEN, UDP_HLEN, byte_rows

IPV4_HLEN = 20
TTL = 64
IP_DF = 0x4000
# The largest UDP payload of a datagram under an MTU, by IP version.
IP_UDP_OVERHEAD = {4: IPV4_HLEN + UDP_HLEN, 6: IPV6_HLEN + UDP_HLEN}


def _words(raw: bytes) -> int:
    """The sum of RAW as 16-bit big-endian words (even length)."""
    return int(np.frombuffer(raw, ">u2").sum(dtype=np.int64))


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


@dataclass(frozen=True)
class Template:
    """The headers of every datagram from SRC:SPORT to DST:DPORT over one
    Ethernet hop. `header` is their bytes with lengths and checksums zero;
    `ip_sum` the IPv4 header's words (0 for IPv6), `udp_sum` the
    pseudo-header's and UDP header's words, lengths left out."""

    header: np.ndarray  # uint8, ETH_HLEN + IP + UDP_HLEN bytes
    version: int
    ip_sum: int
    udp_sum: int

    @property
    def length(self) -> int:
        return len(self.header)

    @property
    def udp_offset(self) -> int:
        return self.length - UDP_HLEN

    def max_payload(self, mtu: int) -> int:
        """The largest UDP payload a datagram carries under MTU."""
        return mtu - IP_UDP_OVERHEAD[self.version]


def template(src_mac: str, dst_mac: str, src: str, dst: str, sport: int,
             dport: int) -> Template:
    """The template of datagrams from SRC:SPORT to DST:DPORT (numeric
    addresses, both IPv4 or both IPv6), framed from SRC_MAC to DST_MAC."""
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if s.version != d.version:
        raise ValueError(f"{src} and {dst} are not of one IP version")
    ports = sport.to_bytes(2, "big") + dport.to_bytes(2, "big")
    udp = ports + bytes(4)  # length and checksum: per datagram
    if d.version == 4:
        ip = (bytes([0x45, 0]) + bytes(2) + bytes(2) + IP_DF.to_bytes(2, "big")
              + bytes([TTL, IPPROTO_UDP]) + bytes(2) + s.packed + d.packed)
        ethertype, ip_sum = ETH_P_IP, _words(ip)
    else:
        ip = (bytes([0x60, 0, 0, 0]) + bytes(2) + bytes([IPPROTO_UDP, TTL])
              + s.packed + d.packed)
        ethertype, ip_sum = ETH_P_IPV6, 0
    eth = _mac(dst_mac) + _mac(src_mac) + ethertype.to_bytes(2, "big")
    pseudo = _words(s.packed + d.packed) + IPPROTO_UDP
    header = np.frombuffer(eth + ip + udp, np.uint8).copy()
    header.flags.writeable = False
    return Template(header, d.version, ip_sum, pseudo + _words(ports))


def fold(total: np.ndarray) -> np.ndarray:
    """One's-complement sums (positive) folded to 16 bits: adding the carries
    back in, as RFC 1071 does, leaves the sum modulo 0xFFFF, with 0xFFFF
    for a multiple of it."""
    return (total - 1) % 0xFFFF + 1


# Each payload byte's weight in its sum of big-endian words: 256 at an even
# offset, 1 at an odd one; as floats, so one BLAS product sums a whole batch
# (exactly: a sum stays far below 2**53).
_WEIGHTS = np.tile(np.array([256.0, 1.0]), 4096)


def payload_sums(rows: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Each row's first LENGTH bytes as a sum of 16-bit big-endian words
    (an odd last byte is the high byte of a word padded with zero), unfolded.
    ROWS: (n, width) uint8; bytes past a row's length are ignored."""
    width = rows.shape[1]
    if len(length) and int(length.min()) < width:
        rows = rows * (np.arange(width) < length[:, None])
    return (rows @ _WEIGHTS[:width]).astype(np.int64)


def write(umem: np.ndarray, frame_addr: np.ndarray, payload_len: np.ndarray,
          payload_sum: np.ndarray, t: Template) -> np.ndarray:
    """Write T's headers at FRAME_ADDR in UMEM, in front of payloads of
    PAYLOAD_LEN bytes already there (or about to be: nothing here reads
    them) whose word sums are PAYLOAD_SUM; returns the frame lengths."""
    n = len(frame_addr)
    udp_len = payload_len.astype(np.int64) + UDP_HLEN
    header = np.empty((n, t.length), np.uint8)
    header[:] = t.header
    words = header.view(">u2")  # every field written below is a word at an even offset
    ip, udp = ETH_HLEN // 2, t.udp_offset // 2
    if t.version == 4:
        total = udp_len + IPV4_HLEN
        words[:, ip + 1] = total
        words[:, ip + 5] = ~fold(t.ip_sum + total) & 0xFFFF
    else:
        words[:, ip + 2] = udp_len
    check = ~fold(t.udp_sum + 2 * udp_len + payload_sum) & 0xFFFF
    check[check == 0] = 0xFFFF  # 0 means "no checksum" over IPv4 and is invalid over IPv6
    words[:, udp + 2] = udp_len
    words[:, udp + 3] = check
    byte_rows(umem, t.length)[frame_addr.astype(np.int64)] = header
    return udp_len - UDP_HLEN + t.length


def send_batch(umem: np.ndarray, frame_addr: np.ndarray, rows: np.ndarray, length: np.ndarray,
               t: Template) -> np.ndarray:
    """Datagram i, the first LENGTH[i] bytes of ROWS[i] behind T's headers,
    written at FRAME_ADDR[i] in UMEM; returns the frame lengths (uint32)."""
    c = core.compiled
    if c is not None:
        frame_len = np.empty(len(frame_addr), np.uint32)
        c.tx_write(umem, np.ascontiguousarray(frame_addr, np.uint64),
                   np.ascontiguousarray(rows), rows.shape[1],
                   np.ascontiguousarray(length, np.int64), t.header, t.version, t.ip_sum,
                   t.udp_sum, frame_len)
        return frame_len
    if rows.shape[1]:
        byte_rows(umem, rows.shape[1])[frame_addr.astype(np.int64) + t.length] = rows
    sums = payload_sums(rows, length)
    return write(umem, frame_addr, length, sums, t).astype(np.uint32)


def payload_matrix(payloads: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """PAYLOADS as (rows, lengths): row i starts with payload i, padded to
    the longest with whatever follows it (write() and payload_sums() read
    only each row's length). One join and one gather, nothing per payload
    but its len()."""
    lengths = np.fromiter(map(len, payloads), np.int64, len(payloads))
    width = int(lengths.max()) if len(lengths) else 0
    blob = np.frombuffer(b"".join(payloads) + bytes(width), np.uint8)
    starts = np.cumsum(lengths) - lengths
    return byte_rows(blob, width)[starts], lengths


def read_rows(umem: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The bytes at START in UMEM as rows as wide as the longest LENGTH; a
    row that would run past UMEM's end is cut there (its missing bytes are
    zero, and past its own length anyway)."""
    width = int(length.max()) if len(length) else 0
    start = start.astype(np.int64)
    fits = start + width <= len(umem)
    if fits.all():
        return byte_rows(umem, width)[start]
    rows = np.zeros((len(start), width), np.uint8)
    rows[fits] = byte_rows(umem, width)[start[fits]]
    for i in np.flatnonzero(~fits):
        tail = umem[int(start[i]):]
        rows[i, :len(tail)] = tail
    return rows
