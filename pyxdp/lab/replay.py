# SPDX-License-Identifier: Apache-2.0
"""Replay token traffic with its recorded cadence, into an interface or a lab.

Two sources, each turned into a timeline of (seconds from start, frame):

- a pcap or pcapng of Ethernet frames, sent byte for byte at their capture
  times;
- a JSONL transcript: one conversation per line, a request and its tokens
  with timestamps, built into token datagrams (pyxdp.lab.traffic) at those times.

A transcript line (version 1; examples/transcript.jsonl is one):

    {"id": "c1",                                   optional, names the line in errors
     "request": {"t": 12.000, "body": {"model": "m", "prompt": "hi"}},
     "tokens": [{"t": 12.180, "text": "Hello"}, {"t": 12.180, "text": ","},
                {"t": 12.210, "text": " world"}],
     "done": {"t": 12.400, "usage": {"completion_tokens": 3}},   optional
     "sport": 40001,                               optional UDP source port
     "ipv6": false}                                optional

Times are seconds on one clock shared by the whole file (Unix time will do);
the replay starts at the earliest. The request body (any JSON) is the REQUEST
payload; tokens that share a timestamp leave in one datagram, as a gateway
that flushes several at once sends them; DONE carries the usage JSON, or
nothing. A conversation without "done" was cut short.

Streams: N copies of the timeline play at once, interleaved by time. Copies
of a transcript get their own source ports, so each conversation is N
flows; copies of a capture are byte-identical.

The sender is one AF_PACKET socket and one thread that sleeps until each
frame is due (then spins the last half millisecond); how late frames left is
measured and reported, not assumed.
"""

import heapq
import json
import math
import socket
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns, routes
from pyxdp.lab import traffic
from pyxdp.lab import veth_lab as lab_mod
from pyxdp.proto import counters, frames
from pyxdp.proto.ethernet import LINK_L2_OVERHEAD
from pyxdp.proto.frames import FrameType
from pyxdp.xdp import loader, netlink
from pyxdp.xdp.maps import ZerolayerMaps

DLT_EN10MB = 1
PCAP_MAGICS = (b"\xa1\xb2\xc3\xd4", b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\x3c\x4d",
               b"\x4d\x3c\xb2\xa1", b"\x0a\x0d\x0d\x0a")
# Token datagram payload budget: fits a 1500-byte MTU over IPv6 with a VLAN tag.
MAX_DATAGRAM_PAYLOAD = 1400
FIRST_SPORT = 40000
SPIN_S = 0.0005  # sleep until this close to a frame's time, then spin


@dataclass(frozen=True)
class Timed:
    at: float  # seconds from the start of the replay
    packet: bytes


@dataclass(frozen=True)
class Route:
    """Who sends to whom: a Lab has the same shape (peer sends, dut receives),
    which is what pyxdp.lab.traffic.udp_packet reads."""

    peer: lab_mod.Endpoint
    dut: lab_mod.Endpoint


# --- sources ------------------------------------------------------------------

def source_format(path: str | Path) -> str:
    """'pcap' or 'jsonl', from the file's first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise ZerolayerError(f"cannot read {path}: {exc.strerror}") from None
    return "pcap" if head in PCAP_MAGICS else "jsonl"


def load(path: str | Path, route=None, *, streams: int = 1,
         port: int = frames.DEFAULT_PORT) -> list[Timed]:
    """The timeline of a pcap or a transcript (which needs ROUTE), STREAMS copies."""
    if source_format(path) == "pcap":
        return packets_from_pcap(path, streams=streams)
    if route is None:
        raise ZerolayerError("a transcript needs addresses to build packets with")
    return packets_from_transcript(path, route, streams=streams, port=port)


def packets_from_pcap(path: str | Path, *, streams: int = 1) -> list[Timed]:
    """The frames of a capture at their capture times, STREAMS copies at once."""
    from scapy.error import Scapy_Exception
    from scapy.utils import PcapReader

    try:
        reader = PcapReader(str(path))
    except (OSError, Scapy_Exception) as exc:
        raise ZerolayerError(f"cannot read {path} as a capture: {exc}") from None
    stamps, packets = [], []
    with reader:
        if reader.linktype != DLT_EN10MB:
            raise ZerolayerError(
                f"{path}: link type {reader.linktype} is not Ethernet; capture on one "
                "interface (tcpdump -i IFACE), not on 'any'"
            )
        for i, pkt in enumerate(reader, 1):
            data = bytes(pkt.original)
            if pkt.wirelen is not None and pkt.wirelen > len(data):
                raise ZerolayerError(
                    f"{path}: packet {i} was captured truncated ({len(data)} of "
                    f"{pkt.wirelen} bytes): capture again with a full snap length (-s 0)"
                )
            stamps.append(float(pkt.time))
            packets.append(data)
    if not packets:
        raise ZerolayerError(f"{path} holds no packets")
    origin = min(stamps)
    one = [Timed(t - origin, p) for t, p in zip(stamps, packets)]
    return in_parallel([one] * _check_streams(streams))


def save_pcap(timeline: list[Timed], path: str | Path, start: float = 0.0) -> None:
    """Write TIMELINE as a capture, frame times from START (Unix seconds)."""
    from scapy.utils import PcapWriter

    with PcapWriter(str(path), linktype=DLT_EN10MB, sync=False) as writer:
        writer.write_header(None)  # write_packet() alone leaves it out
        for item in timeline:
            sec = start + item.at
            writer.write_packet(item.packet, sec=int(sec), usec=round((sec % 1) * 1e6))


@dataclass(frozen=True)
class Recorded:
    """One transcript line, checked."""

    where: str  # "transcript.jsonl:3 (c1)", for errors
    request_at: float
    request: bytes
    tokens: tuple[tuple[float, str], ...]
    done_at: float | None
    usage: bytes
    sport: int | None
    ipv6: bool

    def datagrams(self) -> list[tuple[float, bytes]]:
        """(time, UDP payload): REQUEST, TOKENs grouped by time, DONE."""
        out = [(self.request_at, frames.encode(FrameType.REQUEST, self.request))]
        group: list[bytes] = []
        group_at = 0.0  # the time of the tokens in group
        for at, text in self.tokens:
            frame = frames.encode(FrameType.TOKEN, text)
            full = len(group) == frames.MAX_FRAMES or (
                sum(map(len, group)) + len(frame) > MAX_DATAGRAM_PAYLOAD)
            if group and (at != group_at or full):
                out.append((group_at, b"".join(group)))
                group = []
            group.append(frame)
            group_at = at
        if group:
            out.append((group_at, b"".join(group)))
        if self.done_at is not None:
            out.append((self.done_at, frames.encode(FrameType.DONE, self.usage)))
        for _, payload in out:
            if len(payload) > MAX_DATAGRAM_PAYLOAD:
                raise ZerolayerError(
                    f"{self.where}: a {len(payload)}-byte frame does not fit one datagram "
                    f"({MAX_DATAGRAM_PAYLOAD} bytes)"
                )
        return out


def read_transcript(source) -> list[Recorded]:
    """Parse and check a transcript: a path, or an iterable of JSON lines."""
    if isinstance(source, (str, Path)):
        try:
            with open(source, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise ZerolayerError(f"cannot read {source}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ZerolayerError(f"{source} is neither a capture nor UTF-8 JSON lines") from None
        name = str(source)
    else:
        lines, name = list(source), "transcript"
    out = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            out.append(_recorded(line, f"{name}:{number}"))
    if not out:
        raise ZerolayerError(f"{name} holds no conversations")
    return out


def _recorded(line: str, where: str) -> Recorded:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ZerolayerError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise ZerolayerError(f"{where}: a line must be a JSON object")
    if "id" in obj:
        where = f"{where} ({obj['id']})"

    def time_of(event, what) -> float:
        t = event.get("t") if isinstance(event, dict) else None
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise ZerolayerError(f"{where}: {what} needs a time \"t\" in seconds")
        return float(t)

    request = obj.get("request")
    request_at = time_of(request, "the request")  # which also checks it is an object
    body = request.get("body", {}) if isinstance(request, dict) else {}
    tokens = obj.get("tokens", [])
    if not isinstance(tokens, list):
        raise ZerolayerError(f"{where}: \"tokens\" must be a list of {{\"t\", \"text\"}}")
    parsed, last = [], request_at
    for i, tok in enumerate(tokens):
        at = time_of(tok, f"token {i}")
        if not isinstance(tok.get("text"), str):
            raise ZerolayerError(f"{where}: token {i} needs a \"text\" string")
        if at < last:
            raise ZerolayerError(f"{where}: token {i} is earlier than what comes before it")
        parsed.append((at, tok["text"]))
        last = at
    done_at, usage = None, b""
    if obj.get("done") is not None:
        done_at = time_of(obj["done"], "\"done\"")
        if done_at < last:
            raise ZerolayerError(f"{where}: \"done\" is earlier than the last token")
        if obj["done"].get("usage") is not None:
            usage = _compact(obj["done"]["usage"])
    sport = obj.get("sport")
    if sport is not None and (isinstance(sport, bool) or not isinstance(sport, int)
                              or not 1 <= sport <= 65535):
        raise ZerolayerError(f"{where}: \"sport\" must be a UDP port, 1-65535")
    return Recorded(where, request_at, _compact(body), tuple(parsed), done_at, usage,
                    sport, bool(obj.get("ipv6", False)))


def _compact(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def packets_from_transcript(source, route, *, streams: int = 1,
                            port: int = frames.DEFAULT_PORT) -> list[Timed]:
    """Token datagrams from ROUTE's peer to its dut at the transcript's times,
    STREAMS copies at once, each conversation of each copy its own flow."""
    recorded = read_transcript(source)
    streams = _check_streams(streams)
    origin = min(r.request_at for r in recorded)
    copies = []
    for copy in range(streams):
        timeline = []
        for i, rec in enumerate(recorded):
            sport = (rec.sport or FIRST_SPORT + i) + copy * len(recorded)
            if sport > 65535:
                raise ZerolayerError(
                    f"{rec.where}: {streams} streams run out of source ports; use fewer"
                )
            if rec.ipv6 and not route.dut.ipv6:
                raise ZerolayerError(f"{rec.where}: an IPv6 conversation, and no IPv6 destination")
            if not rec.ipv6 and not route.dut.ipv4:
                raise ZerolayerError(f"{rec.where}: an IPv4 conversation, and no IPv4 destination")
            for at, payload in rec.datagrams():
                pkt = traffic.udp_packet(route, payload, sport=sport, dport=port, ipv6=rec.ipv6)
                timeline.append(Timed(at - origin, bytes(pkt)))
        timeline.sort(key=lambda t: t.at)  # stable: a conversation keeps its order
        copies.append(timeline)
    return in_parallel(copies)


def in_parallel(timelines: list[list[Timed]]) -> list[Timed]:
    """Several sorted timelines played at once, interleaved by time."""
    return list(heapq.merge(*timelines, key=lambda t: t.at))


def _check_streams(streams: int) -> int:
    if not isinstance(streams, int) or streams < 1:
        raise ZerolayerError("the number of streams must be at least 1")
    return streams


# --- addresses for an interface that is not a lab --------------------------------

def route_from_interface(ifname: str, netns_name: str | None, destinations,
                         dst_mac: str | None = None) -> Route:
    """Send from IFNAME's own MAC and addresses to DESTINATIONS (at most one
    IPv4 and one IPv6 address); the destination MAC is DST_MAC, or the
    kernel's neighbour entry for the first destination."""
    import ipaddress

    from pyroute2 import IPRoute

    dst = {}
    for text in destinations:
        try:
            addr = ipaddress.ip_address(text)
        except ValueError:
            raise ZerolayerError(f"--dst {text!r} is not an IP address") from None
        if addr.version in dst:
            raise ZerolayerError("give at most one IPv4 and one IPv6 --dst")
        dst[addr.version] = str(addr)
    if not dst:
        raise ZerolayerError("a transcript into an interface needs --dst ADDRESS (where to send)")
    with netns.entered(netns_name), IPRoute() as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise ZerolayerError(f"no interface named {ifname!r} (see `ip link show`)")
        index = found[0]
        mac = ipr.get_links(index)[0].get_attr("IFLA_ADDRESS")
        own = {}
        for family, version in ((socket.AF_INET, 4), (socket.AF_INET6, 6)):
            addrs = [a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(index=index, family=family)]
            own[version] = addrs[0] if addrs else None
    if dst_mac is None:
        dst_mac = routes.neighbour(next(iter(dst.values())), ifname, netns_name)
    for version in dst:
        if not own[version]:
            raise ZerolayerError(f"{ifname} has no IPv{version} address to send from")
    sender = lab_mod.Endpoint(netns_name, ifname, mac, own[4], own[6])
    receiver = lab_mod.Endpoint(None, "", dst_mac, dst.get(4), dst.get(6))
    return Route(sender, receiver)


# --- sending -------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayResult:
    interface: str
    netns: str | None
    sent: int
    bytes: int
    streams: int
    speed: float | None  # None: top speed, no waiting
    span_s: float  # the recorded span, at the replay's speed
    elapsed_s: float
    late_median_ms: float  # how late frames left, against their due time
    late_max_ms: float

    def to_json(self) -> dict:
        return asdict(self)


def replay_packets(timeline: list[Timed], ifname: str, netns_name: str | None = None, *,
                   speed: float | None = 1.0, streams: int = 1) -> ReplayResult:
    """Send TIMELINE out of IFNAME at its times divided by SPEED (None: as
    fast as possible). STREAMS is only reported: the timeline holds them."""
    if speed is not None and speed <= 0:
        raise ZerolayerError("the speed-up factor must be positive")
    if not timeline:
        raise ZerolayerError("nothing to replay")
    mtu = netlink.query(ifname, netns_name).mtu
    biggest = max(len(t.packet) for t in timeline)
    if biggest > mtu + LINK_L2_OVERHEAD:
        raise ZerolayerError(
            f"a {biggest}-byte frame does not fit {ifname}'s MTU ({mtu}); nothing was sent"
        )
    try:
        with netns.entered(netns_name):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: send only
    except PermissionError:
        raise ZerolayerError(
            "sending raw frames needs root (CAP_NET_RAW): run it with sudo") from None
    late: list[float] = []
    sent = total = 0
    try:
        sock.bind((ifname, 0))
        start = time.perf_counter()
        for item in timeline:
            if speed is not None:
                due = start + item.at / speed
                _wait_until(due)
                late.append(time.perf_counter() - due)
            sock.send(item.packet)
            sent += 1
            total += len(item.packet)
        elapsed = time.perf_counter() - start
    except OSError as exc:
        raise ZerolayerError(
            f"sending on {ifname} failed after {sent} frames: {exc.strerror}"
        ) from None
    finally:
        sock.close()
    span = timeline[-1].at / speed if speed else 0.0
    return ReplayResult(
        interface=ifname, netns=netns_name, sent=sent, bytes=total,
        streams=streams, speed=speed, span_s=round(span, 6), elapsed_s=round(elapsed, 6),
        late_median_ms=round(statistics.median(late) * 1e3, 3) if late else 0.0,
        late_max_ms=round(max(late) * 1e3, 3) if late else 0.0,
    )


def _wait_until(due: float) -> None:
    left = due - time.perf_counter()
    if left > SPIN_S:
        time.sleep(left - SPIN_S)
    while time.perf_counter() < due:
        pass


# --- into a lab ----------------------------------------------------------------

@dataclass
class LabReplay:
    lab: dict
    attach: dict
    result: ReplayResult
    counters: dict[str, int]
    expected: dict[str, int]

    @property
    def matches(self) -> bool:
        return self.counters == self.expected

    def check(self) -> None:
        require_judged(self.counters, self.expected)

    def to_json(self) -> dict:
        return {"lab": self.lab, "attach": self.attach, "replay": self.result.to_json(),
                "counters": counters.nest(self.counters),
                "expected": counters.nest(self.expected), "matches": self.matches}


def replay_in_lab(path: str | Path, *, streams: int = 1, speed: float | None = 1.0,
                  port: int = frames.DEFAULT_PORT, progress=lambda line: None) -> LabReplay:
    """Build a lab, attach zerolayer to its dut0, replay PATH from the peer,
    and read the counters next to what the reference judge says they must be."""
    lab_mod.sweep_stale()
    with lab_mod.Lab() as lab:
        timeline = load(path, lab, streams=streams, port=port)
        expected = traffic.expected_counters([t.packet for t in timeline], ports=(port,))
        attached = loader.attach(lab.dut.ifname, netns=lab.dut.netns, ports=[port])
        progress(f"lab: {lab.peer.netns}/{lab.peer.ifname} ==veth==> "
                 f"{lab.dut.netns}/{lab.dut.ifname}; zerolayer attached in {attached.mode} mode")
        try:
            result = replay_packets(timeline, lab.peer.ifname, lab.peer.netns,
                                    speed=speed, streams=streams)
            seen = _settled_counters(attached.pin_dir, expected["packets"])
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)
        return LabReplay(
            lab={"dut": asdict(lab.dut), "peer": asdict(lab.peer)},
            attach=attached.to_json(), result=result, counters=seen, expected=expected,
        )


def _settled_counters(pin_dir: str, packets: int, timeout: float = 2.0) -> dict[str, int]:
    """The counters once the program has seen PACKETS (or TIMEOUT passed:
    then the shortfall shows in the comparison)."""
    deadline = time.monotonic() + timeout
    with ZerolayerMaps.open_pinned(pin_dir) as maps:
        while True:
            seen = maps.read_counters()
            if seen["packets"] >= packets or time.monotonic() > deadline:
                return seen
            time.sleep(0.02)


def require_judged(counted: dict[str, int], expected: dict[str, int]) -> None:
    """A one-line error naming every counter that disagrees with the
    reference judge's EXPECTED."""
    bad = [k for k in counters.FIELDS if counted[k] != expected[k]]
    if bad:
        raise ZerolayerError("counters disagree with the reference judge on " + ", ".join(bad))
