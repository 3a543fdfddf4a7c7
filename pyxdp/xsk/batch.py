"""A batch of frames received on an AF_XDP socket, with zero-copy access.

A Batch holds copies of the RX descriptors (chunk address and length per
frame) and the socket's UMEM; the frame bytes stay where the kernel wrote
them. Nothing is done per frame unless the caller asks:
  - `addr`, `length`: numpy arrays, one entry per frame;
  - `packet(i)`, `payload(i)`: memoryviews into UMEM;
  - `headers`: the Ethernet/VLAN/IP/UDP fields of every frame at once, as
    numpy arrays (computed on first use, vectorised);
  - `source(i)`, `destination(i)`: "addr:port" strings.
release() hands the chunks back to the kernel (fill ring); after it the
views may be overwritten by later frames. Use the batch as a context
manager to release it on the way out.

The frames are those zerolayer's program redirected: valid token datagrams
in Ethernet, up to two VLAN tags, IPv4 (options allowed) or IPv6 with UDP as
the next header (docs/spec.md §1.3). The parse below relies on that.
"""

import ipaddress
from dataclasses import dataclass

import numpy as np

from pyxdp.proto.ethernet import ETH_HLEN, ETH_P_IP, MAX_VLAN_TAGS, VLAN_ETHERTYPES

IPV6_HLEN = 40
UDP_HLEN = 8


@dataclass(frozen=True)
class Headers:
    """Per-frame header fields, one array entry per frame."""

    ip_version: np.ndarray  # 4 or 6
    src_addr: np.ndarray  # (n, 16) bytes; IPv4 in the first 4
    dst_addr: np.ndarray  # (n, 16)
    sport: np.ndarray
    dport: np.ndarray
    payload_offset: np.ndarray  # from the start of the frame
    payload_length: np.ndarray


def parse_headers(umem: np.ndarray, addr: np.ndarray, length: np.ndarray) -> Headers:
    """Vectorised parse of the frames at ADDR in UMEM."""
    base = addr.astype(np.int64)
    last = np.int64(len(umem) - 1)

    def byte(off):
        return umem[np.minimum(base + off, last)].astype(np.int64)

    def be16(off):
        return (byte(off) << 8) | byte(off + 1)

    l3 = np.full(len(addr), ETH_HLEN, np.int64)
    ethertype = be16(12)
    for _ in range(MAX_VLAN_TAGS):
        tagged = np.isin(ethertype, VLAN_ETHERTYPES)
        if not tagged.any():
            break
        ethertype = np.where(tagged, be16(l3 + 2), ethertype)
        l3 = l3 + 4 * tagged
    v4 = ethertype == ETH_P_IP
    l4 = np.where(v4, l3 + (byte(l3) & 0xF) * 4, l3 + IPV6_HLEN)
    span = np.arange(16, dtype=np.int64)

    def address(off):
        picked = umem[np.minimum((base + off)[:, None] + span, last)]
        picked[v4, 4:] = 0  # IPv4 uses the first four bytes
        return picked

    return Headers(
        ip_version=np.where(v4, 4, 6).astype(np.uint8),
        src_addr=address(np.where(v4, l3 + 12, l3 + 8)),
        dst_addr=address(np.where(v4, l3 + 16, l3 + 24)),
        sport=be16(l4).astype(np.uint16),
        dport=be16(l4 + 2).astype(np.uint16),
        payload_offset=l4 + UDP_HLEN,
        payload_length=np.clip(be16(l4 + 4) - UDP_HLEN, 0, length.astype(np.int64) - l4 - UDP_HLEN),
    )


def endpoint(version: int, raw: np.ndarray, port: int) -> str:
    """'198.18.0.2:40000' or '[fd00::2]:40000'."""
    if version == 4:
        return f"{ipaddress.IPv4Address(raw[:4].tobytes())}:{port}"
    return f"[{ipaddress.IPv6Address(raw.tobytes())}]:{port}"


class Batch:
    def __init__(self, xsk, addr: np.ndarray, length: np.ndarray):
        self._xsk = xsk
        self.queue = xsk.queue
        self.addr = addr
        self.length = length
        self._headers: Headers | None = None
        self._released = not len(addr)

    def __len__(self) -> int:
        return len(self.addr)

    def __bool__(self) -> bool:
        return len(self.addr) > 0

    @property
    def umem(self) -> np.ndarray:
        """The whole UMEM as bytes (frame i is umem[addr[i]:addr[i]+length[i]])."""
        return self._xsk.umem

    @property
    def headers(self) -> Headers:
        if self._headers is None:
            self._headers = parse_headers(self._xsk.umem, self.addr, self.length)
        return self._headers

    def packet(self, i: int) -> memoryview:
        """Frame I from its Ethernet header, in place."""
        return self._xsk.frame(int(self.addr[i]), int(self.length[i]))

    def payload(self, i: int) -> memoryview:
        """The UDP payload of frame I (its token frames), in place."""
        h = self.headers
        start = int(self.addr[i]) + int(h.payload_offset[i])
        return self._xsk.frame(start, int(h.payload_length[i]))

    def source(self, i: int) -> str:
        h = self.headers
        return endpoint(int(h.ip_version[i]), h.src_addr[i], int(h.sport[i]))

    def destination(self, i: int) -> str:
        h = self.headers
        return endpoint(int(h.ip_version[i]), h.dst_addr[i], int(h.dport[i]))

    def release(self) -> None:
        """Recycle the chunks; the views above are no longer this batch's."""
        if not self._released:
            self._released = True
            self._xsk.recycle(self.addr)

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
