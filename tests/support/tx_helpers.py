# SPDX-License-Identifier: Apache-2.0
"""What the AF_XDP transmit tests receive with: a UDP socket in the lab's dut
namespace (the kernel checks every checksum on the way to it), a raw
capture of dut0 (the frames as they arrived, for the reference judge),
the namespace's UDP counters, IPv6 for the lab's peer (the lab keeps
its peer silent, IPv6 off; a sender of IPv6 needs it on), and datagrams
sent back on from the chunks they arrived in (a shared UMEM)."""

import select
import socket
import time
from dataclasses import dataclass, field

from pyxdp.kernel import mib
from pyxdp.kernel import netns as netns_mod
from pyxdp.lab.veth_lab import Lab
from pyxdp.proto import datagram, judge
from pyxdp.proto.frames import DEFAULT_PORT, Frame, FrameType

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
BUFFER = 64 << 20  # what a test sends fits whole, read or not
QUIET_S = 0.3


def enable_peer_ipv6(lab: Lab) -> None:
    """IPv6 on the peer's end, with its lab address and a static neighbour
    for the dut's, as the lab gives the dut (a sysctl of the lab's own
    namespace: nothing of the host changes)."""
    from pyroute2 import IPRoute

    with lab.in_peer():
        for scope in ("all", "default", lab.peer.ifname):
            with open(f"/proc/sys/net/ipv6/conf/{scope}/disable_ipv6", "w") as f:
                f.write("0")
        with IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=lab.peer.ifname)[0]
            ipr.addr("add", index=idx, address=lab.peer.ipv6, prefixlen=64, flags=0x02)  # nodad
            ipr.neigh("add", dst=lab.dut.ipv6, lladdr=lab.dut.mac, ifindex=idx,
                      state="permanent")


def udp_counters(lab: Lab, version: int) -> dict[str, int]:
    """/proc/net/snmp's Udp (or snmp6's Udp6) counters in the dut namespace."""
    return udp_counters_in(lab.dut.netns, version)


def udp_counters_in(netns: str, version: int) -> dict[str, int]:
    """/proc/net/snmp's Udp (or snmp6's Udp6) counters in NETNS: InCsumErrors
    is what the kernel dropped for a wrong checksum."""
    with netns_mod.entered(netns):
        if version == 4:
            return mib.read("Udp")
        with open("/proc/thread-self/net/snmp6") as f:
            pairs = [line.split() for line in f if line.startswith("Udp6")]
        return {name.removeprefix("Udp6"): int(value) for name, value in pairs}


class UdpReceiver:
    """A UDP socket bound to ADDRESS:PORT inside NETNS; "::" takes IPv4 and
    IPv6 both."""

    def __init__(self, netns: str, address: str, port: int):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with netns_mod.entered(netns):
            self.sock = socket.socket(family, socket.SOCK_DGRAM)
        if address == "::":
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BUFFER)
        self.sock.bind((address, port))

    @classmethod
    def at_dut(cls, lab: Lab, version: int, port: int) -> "UdpReceiver":
        """On the lab dut's address of VERSION."""
        return cls(lab.dut.netns, lab.dut.ipv6 if version == 6 else lab.dut.ipv4, port)

    def drain(self, expect: int | None = None) -> list[tuple[bytes, tuple]]:
        """Every datagram queued, until QUIET_S passes without one (once
        EXPECT have come, a moment more, to catch any extra)."""
        got: list[tuple[bytes, tuple]] = []
        while True:
            quiet = 0.1 if expect is not None and len(got) >= expect else QUIET_S
            if not select.select([self.sock], [], [], quiet)[0]:
                return got
            got.append(self.sock.recvfrom(65535))

    def close(self) -> None:
        self.sock.close()


class Capture:
    """Every frame arriving at the dut's interface, from now on."""

    def __init__(self, lab: Lab):
        with lab.in_dut():
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BUFFER)
        self.sock.bind((lab.dut.ifname, 0))

    def udp_to(self, port: int) -> list[bytes]:
        """The frames captured so far that carry UDP to PORT, in order."""
        out = []
        deadline = time.monotonic() + QUIET_S
        while True:
            ready = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))[0]
            if not ready:
                return out
            frame, addr = self.sock.recvfrom(65535)
            deadline = time.monotonic() + QUIET_S
            if addr[2] == PACKET_OUTGOING:
                continue
            seen = judge.classify_packet(frame)
            if seen.kind == judge.UDP and seen.dport == port:
                out.append(frame)

    def close(self) -> None:
        self.sock.close()


def emitted_payload(datagram: int, frames_per_datagram: int, payload_size: int) -> bytes:
    """What `zerolayer emit` puts in datagram DATAGRAM, as docs/spec.md
    §5.11 states it, written out plainly."""
    out = b""
    for j in range(frames_per_datagram):
        token = datagram * frames_per_datagram + j
        digits = f"{token:010d}"[-payload_size:] if payload_size else ""
        text = (digits + (" tok" * payload_size)[:max(0, payload_size - 10)]).encode()
        out += len(text).to_bytes(4, "big") + b"\x02" + text
    return out


@dataclass
class Echo:
    """What echo_from_own_chunks saw."""

    modes: tuple[str, str]  # the RX and the TX socket's
    dut_addr: str
    sent: list[bytes] = field(default_factory=list)
    echoed: list[tuple[bytes, tuple]] = field(default_factory=list)
    same_chunk: bool = True
    completed: int = 0
    rx_dropped: int = 0
    csum_errors: int = 0  # counted by the peer's kernel during the echo

    def check(self, ordered: bool = True) -> None:
        """Every datagram back once, byte for byte (and in order, if
        ORDERED), from the dut's port, sent from the chunk it arrived in,
        with a checksum the peer's kernel accepts."""
        assert self.same_chunk
        assert self.completed == len(self.sent) and self.rx_dropped == 0
        back = [datagram.decode_datagram(p) for p, _ in self.echoed]
        want = [[Frame(FrameType.TOKEN, t)] for t in self.sent]
        assert back == want if ordered else sorted(map(repr, back)) == sorted(map(repr, want))
        assert {src[:2] for _, src in self.echoed} == {(self.dut_addr, DEFAULT_PORT)}
        assert self.csum_errors == 0


def echo_from_own_chunks(lab: Lab, version: int, count: int = 1000) -> Echo:
    """An RX socket (registered with zerolayer on the dut) and a TX socket
    on one queue, one UMEM: each of COUNT datagrams from a plain socket in
    the peer namespace is sent back out of the chunk it arrived in,
    headers rewritten in place. A UMEM of 64 chunks carries them all, so
    completed chunks do go back to be filled. The peer's plain socket
    leaves its checksums partial where the device finishes them (veth
    finishes none); each goes back with a full one."""
    import numpy as np

    from pyxdp.kernel import routes
    from pyxdp.xsk import headers
    from pyxdp.xsk.send_on import send_on
    from pyxdp.xsk.socket import XskSocket
    from pyxdp.xsk.tx import XskTxSocket

    peer_addr, dut_addr = (lab.peer.ipv6, lab.dut.ipv6) if version == 6 else \
        (lab.peer.ipv4, lab.dut.ipv4)
    with lab.in_peer():
        peer = socket.socket(socket.AF_INET6 if version == 6 else socket.AF_INET,
                             socket.SOCK_DGRAM)
    peer.bind((peer_addr, 0))
    peer.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
    peer.settimeout(2.0)
    port = peer.getsockname()[1]
    errors_before = udp_counters_in(lab.peer.netns, version)["InCsumErrors"]
    hop = routes.resolve(peer_addr, lab.dut.ifname, lab.dut.netns)
    back = headers.template(hop.src_mac, hop.dst_mac, hop.src, peer_addr, DEFAULT_PORT, port)
    sent = [f"token {i} ✓".encode() * (1 + i % 7) for i in range(count)]
    try:
        with XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, frames=64, rx_size=64,
                       completion_size=64) as rx, \
                XskTxSocket(lab.dut.ifname, 0, netns=lab.dut.netns, tx_size=64,
                            share_umem_of=rx) as tx:
            echo = Echo((rx.mode, tx.mode), dut_addr, sent)
            for start in range(0, len(sent), 32):  # within what 64 chunks hold
                for text in sent[start:start + 32]:
                    peer.sendto(Frame(FrameType.TOKEN, text).encode(), (dut_addr, DEFAULT_PORT))
                want = len(sent[start:start + 32])
                while want:
                    batch = rx.recv(want, timeout=2.0)
                    assert batch, "the datagrams did not reach the AF_XDP socket"
                    chunks = batch.addr & rx.memory.chunk_mask
                    out = send_on(batch, tx, back)
                    echo.same_chunk &= bool(np.array_equal(out & rx.memory.chunk_mask, chunks))
                    want -= len(out)
                assert tx.flush() == 0
                echo.echoed += [peer.recvfrom(2048) for _ in range(len(sent[start:start + 32]))]
            echo.completed, echo.rx_dropped = tx.tally.completed, rx.statistics().rx_dropped
    finally:
        peer.close()
    echo.csum_errors = udp_counters_in(lab.peer.netns, version)["InCsumErrors"] - errors_before
    return echo
