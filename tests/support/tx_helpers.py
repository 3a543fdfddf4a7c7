# SPDX-License-Identifier: Apache-2.0
"""What the AF_XDP transmit tests receive with: a UDP socket in the lab's dut
namespace (the kernel checks every checksum on the way to it), a raw
capture of dut0 (the frames as they arrived, for the reference judge),
the namespace's UDP counters, and IPv6 for the lab's peer (the lab keeps
its peer silent, IPv6 off; a sender of IPv6 needs it on)."""

import select
import socket
import time

from pyxdp.kernel import netns as netns_mod
from pyxdp.lab.veth_lab import Lab
from pyxdp.proto import judge

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
            with open("/proc/thread-self/net/snmp") as f:
                rows = [line.split() for line in f if line.startswith("Udp:")]
            return dict(zip(rows[0][1:], map(int, rows[1][1:])))
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
