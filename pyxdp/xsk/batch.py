# SPDX-License-Identifier: Apache-2.0
"""A batch of datagrams received on an AF_XDP socket, with zero-copy access.

A Batch holds copies of the RX descriptors (chunk address and length per
received packet, i.e. per datagram) and the socket's UMEM; the bytes stay
where the kernel wrote them. Nothing is done per packet unless the caller
asks:
  - `addr`, `length`: numpy arrays, one entry per datagram;
  - `packet(i)`, `payload(i)`: memoryviews into UMEM;
  - `headers`: the Ethernet/VLAN/IP/UDP fields of every datagram at once,
    as numpy arrays (computed on first use, vectorised);
  - `frames()`: the token frames of every datagram, as numpy arrays with one
    entry per frame (pyxdp.xsk.frame_arrays; computed once, vectorised);
  - `source(i)`, `destination(i)`: "addr:port" strings; `sources()`,
    `destinations()`: the same for every datagram, each name made once.
release() hands the chunks back to the kernel (fill ring); after it the
views may be overwritten by later datagrams. Use the batch as a context
manager to release it on the way out.

The datagrams are those zerolayer's program redirected: valid token datagrams
in Ethernet, up to two VLAN tags, IPv4 (options allowed) or IPv6 with UDP as
the next header (docs/spec.md §1.3). The parse below relies on that.
"""

import ipaddress
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from pyxdp.proto.ethernet import (
    ETH_HLEN,
    ETH_P_IP,
    MAX_VLAN_TAGS,
    PARSED_L2_OVERHEAD,
    VLAN_ETHERTYPES,
    VLAN_HLEN,
)
from pyxdp.proto.frames import MAX_FRAMES
from pyxdp.xsk import core
from pyxdp.xsk.frame_arrays import FrameArrays, walk_frames

IPV6_HLEN = 40
IPV4_MAX_HLEN = 60  # IHL 15
UDP_HLEN = 8
# The longest header stack parsed: Ethernet, two VLAN tags, IPv4 with options, UDP.
HEADER_WINDOW = PARSED_L2_OVERHEAD + IPV4_MAX_HLEN + UDP_HLEN
_WINDOW_SPAN = np.arange(HEADER_WINDOW, dtype=np.int64)


def byte_rows(buf: np.ndarray, width: int) -> np.ndarray:
    """Every WIDTH-byte run of BUF, as rows of a view (no copy): indexing it
    with N start offsets copies N runs, a memcpy each, where indexing BUF
    byte by byte would compute N × WIDTH indexes; assigning to it so
    indexed writes N runs into BUF in place."""
    return np.ndarray((max(len(buf) - width + 1, 0), width), np.uint8, buffer=buf,
                      strides=(1, 1))


def _windows(umem: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """The first HEADER_WINDOW bytes of each packet, (n, HEADER_WINDOW)."""
    if not len(addr) or int(addr.max()) <= len(umem) - HEADER_WINDOW:
        return byte_rows(umem, HEADER_WINDOW)[addr.astype(np.int64)]
    # A packet in UMEM's last bytes (not where the kernel puts one: chunks
    # keep 256 bytes of headroom): read it byte by byte, clamped.
    return umem[np.minimum(addr.astype(np.int64)[:, None] + _WINDOW_SPAN, len(umem) - 1)]


@dataclass(frozen=True)
class Headers:
    """Per-datagram header fields, one array entry per received packet."""

    ip_version: np.ndarray  # 4 or 6
    src_addr: np.ndarray  # (n, 16) bytes; IPv4 in the first 4
    dst_addr: np.ndarray  # (n, 16)
    sport: np.ndarray
    dport: np.ndarray
    payload_offset: np.ndarray  # from the start of the packet
    payload_length: np.ndarray


def parse_headers(umem: np.ndarray, addr: np.ndarray, length: np.ndarray) -> Headers:
    """Vectorised parse of the packets at ADDR in UMEM: one gather of each
    packet's first HEADER_WINDOW bytes, then numpy on that (n, window) array,
    whose fields sit at a column that varies by row (VLAN tags, IP options)."""
    n = len(addr)
    window = _windows(umem, addr).reshape(-1)
    base = np.arange(n, dtype=np.int64) * HEADER_WINDOW

    def columns(col, width):
        """WIDTH bytes of each row from its column COL (never past its row:
        HEADER_WINDOW covers the longest header stack)."""
        return byte_rows(window, width)[base + col]

    def be16(col):
        return columns(col, 2).view(">u2").ravel().astype(np.int64)

    l3 = np.full(n, ETH_HLEN, np.int64)
    ethertype = be16(np.full(n, 12))
    for _ in range(MAX_VLAN_TAGS):
        tagged = (ethertype == VLAN_ETHERTYPES[0]) | (ethertype == VLAN_ETHERTYPES[1])
        if not tagged.any():
            break
        ethertype = np.where(tagged, be16(l3 + 2), ethertype)
        l3 = l3 + VLAN_HLEN * tagged
    v4 = ethertype == ETH_P_IP
    l4 = np.where(v4, l3 + (columns(l3, 1)[:, 0] & 0xF).astype(np.int64) * 4, l3 + IPV6_HLEN)
    udp = columns(l4, UDP_HLEN - 2).view(">u2")  # sport, dport, length

    def address(col):
        picked = columns(col, 16)
        picked[v4, 4:] = 0  # IPv4 uses the first four bytes
        return picked

    return Headers(
        ip_version=np.where(v4, 4, 6).astype(np.uint8),
        src_addr=address(np.where(v4, l3 + 12, l3 + 8)),
        dst_addr=address(np.where(v4, l3 + 16, l3 + 24)),
        sport=udp[:, 0].astype(np.uint16),
        dport=udp[:, 1].astype(np.uint16),
        payload_offset=l4 + UDP_HLEN,
        payload_length=np.clip(udp[:, 2].astype(np.int64) - UDP_HLEN, 0,
                               length.astype(np.int64) - l4 - UDP_HLEN),
    )


def compiled_headers(c, umem: np.ndarray, addr: np.ndarray, length: np.ndarray) -> Headers:
    """parse_headers by the compiled core C: one record per datagram."""
    rec = np.empty(len(addr), core.HEADER_RECORD)
    c.headers(umem, _u64(addr), _u32(length), rec)
    return Headers(ip_version=rec["ip_version"], src_addr=rec["src_addr"],
                   dst_addr=rec["dst_addr"], sport=rec["sport"], dport=rec["dport"],
                   payload_offset=rec["payload_offset"], payload_length=rec["payload_length"])


def compiled_frames(c, umem: np.ndarray, umem_view: memoryview, addr: np.ndarray,
                    length: np.ndarray) -> FrameArrays:
    """parse_headers and walk_frames by the compiled core C, in one call:
    the columns come back in one buffer, viewed here without a copy."""
    cols, k, broken = c.frames(umem, _u64(addr), _u32(length), MAX_FRAMES)
    ints = np.frombuffer(cols, np.int64, 3 * k).reshape(3, k)
    return FrameArrays(umem_view, ints[0], np.frombuffer(cols, np.uint8, k, 24 * k), ints[1],
                       ints[2], np.frombuffer(broken, np.int64), (c, cols, k))


def _u64(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.uint64 and a.flags.c_contiguous else np.ascontiguousarray(a, np.uint64)


def _u32(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.uint32 and a.flags.c_contiguous else np.ascontiguousarray(a, np.uint32)


def endpoint(version: int, raw: np.ndarray, port: int) -> str:
    """'198.18.0.2:40000' or '[fd00::2]:40000'."""
    if version == 4:
        return f"{ipaddress.IPv4Address(raw[:4].tobytes())}:{port}"
    return f"[{ipaddress.IPv6Address(raw.tobytes())}]:{port}"


# An endpoint as bytes: 16 address bytes, the port (big-endian), the IP version.
_ENDPOINT_KEY = 19


@lru_cache(maxsize=1 << 16)
def _endpoint_from_key(key: bytes) -> str:
    return endpoint(key[18], np.frombuffer(key[:16], np.uint8), int.from_bytes(key[16:18], "big"))


def endpoints(version: np.ndarray, raw: np.ndarray, port: np.ndarray) -> list[str]:
    """endpoint() of every row; a name seen before is not formatted again
    (a gateway's flows are few, and formatting an address costs microseconds)."""
    keys = np.empty((len(version), _ENDPOINT_KEY), np.uint8)
    keys[:, :16] = raw
    keys[:, 16:18] = port.astype(">u2").view(np.uint8).reshape(-1, 2)
    keys[:, 18] = version
    blob = keys.tobytes()
    return [_endpoint_from_key(blob[i:i + _ENDPOINT_KEY])
            for i in range(0, len(blob), _ENDPOINT_KEY)]


class Batch:
    def __init__(self, xsk, addr: np.ndarray, length: np.ndarray):
        self._xsk = xsk
        self.queue = xsk.queue
        self.addr = addr
        self.length = length
        self._headers: Headers | None = None
        self._frames: FrameArrays | None = None
        self._released = not len(addr)

    def __len__(self) -> int:
        return len(self.addr)

    def __bool__(self) -> bool:
        return len(self.addr) > 0

    @property
    def umem(self) -> np.ndarray:
        """The whole UMEM as bytes (packet i is umem[addr[i]:addr[i]+length[i]])."""
        return self._xsk.umem

    @property
    def headers(self) -> Headers:
        if self._headers is None:
            c = core.compiled
            self._headers = (compiled_headers(c, self._xsk.umem, self.addr, self.length) if c
                             else parse_headers(self._xsk.umem, self.addr, self.length))
        return self._headers

    def frames(self) -> FrameArrays:
        """Every token frame of the batch, one array entry per frame."""
        if self._frames is None and core.compiled is not None:
            self._frames = compiled_frames(core.compiled, self._xsk.umem, self._xsk.umem_view,
                                           self.addr, self.length)
        if self._frames is None:
            h = self.headers
            start = self.addr.astype(np.int64) + h.payload_offset
            self._frames = walk_frames(self._xsk.umem, self._xsk.umem_view, start,
                                       start + h.payload_length)
        return self._frames

    def packet(self, i: int) -> memoryview:
        """Packet I from its Ethernet header, in place."""
        return self._xsk.frame(int(self.addr[i]), int(self.length[i]))

    def payload(self, i: int) -> memoryview:
        """The UDP payload of datagram I (its token frames), in place."""
        h = self.headers
        start = int(self.addr[i]) + int(h.payload_offset[i])
        return self._xsk.frame(start, int(h.payload_length[i]))

    def source(self, i: int) -> str:
        h = self.headers
        return endpoint(int(h.ip_version[i]), h.src_addr[i], int(h.sport[i]))

    def destination(self, i: int) -> str:
        h = self.headers
        return endpoint(int(h.ip_version[i]), h.dst_addr[i], int(h.dport[i]))

    def sources(self) -> list[str]:
        """source(i) of every datagram."""
        h = self.headers
        return endpoints(h.ip_version, h.src_addr, h.sport)

    def destinations(self) -> list[str]:
        h = self.headers
        return endpoints(h.ip_version, h.dst_addr, h.dport)

    def release(self) -> None:
        """Recycle the chunks; the views above are no longer this batch's."""
        if not self._released:
            self._released = True
            self._xsk.recycle(self.addr)

    def release_except(self, taken: np.ndarray) -> None:
        """Release, except the chunks of the datagrams where TAKEN (a mask)
        is true: those are a transmit socket's now, and go back to the fill
        ring when their sends complete (pyxdp/xsk/send_on.py)."""
        if not self._released:
            self._released = True
            self._xsk.recycle(self.addr[~taken])

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
