# SPDX-License-Identifier: Apache-2.0
"""`zerolayer demo`: the main job on a lab it builds and removes itself.

It attaches to the lab's dut0 with flow tracking on and registers an AF_XDP
socket on its rx queue. Then the replay engine plays interleaved token
streams from the peer at their real cadence (most tokens ~20 ms apart, some
~90 ms), with malformed and ordinary traffic scattered through them. Valid
datagrams are redirected to the socket and their text is shown as it
arrives. At the end every XDP counter is compared with what the reference
judge says the replay must produce, and each stream's cadence, as XDP
measured it at the driver, is shown.
"""

import random
import threading
import time
from dataclasses import asdict, dataclass, field

from pyxdp.errors import ZerolayerError
from pyxdp.lab import replay, traffic
from pyxdp.lab import veth_lab as lab_mod
from pyxdp.proto import counters
from pyxdp.xdp import flows, loader, stats
from pyxdp.xsk import listen

# Time for the last datagrams to arrive once the replay is sent.
DRAIN_S = 3.0


@dataclass
class DemoReport:
    lab: dict
    attach: dict
    xsk: dict
    packets_sent: int
    counters: dict[str, int]
    expected: dict[str, int]
    datagrams_received: int
    replay: dict = field(default_factory=dict)
    streams: list = field(default_factory=list)
    flows: list = field(default_factory=list)


def _timeline(lab, streams: int) -> list[replay.Timed]:
    """The conversations at their cadence, other traffic scattered through."""
    talk = replay.packets_from_transcript(traffic.transcript(streams), lab)
    rng = random.Random(11)
    extras = sorted((replay.Timed(rng.uniform(0, talk[-1].at), bytes(p))
                     for p in traffic.non_token_packets(lab)), key=lambda t: t.at)
    return replay.in_parallel([talk, extras])


def _replay_in_background(lab, timeline, result: dict) -> threading.Thread:
    def play():
        result.update(replay.replay_packets(timeline, lab.peer.ifname, lab.peer.netns).to_json())

    thread = threading.Thread(target=play, name="demo-replay", daemon=True)
    thread.start()
    return thread


def _consume(listener, view, expect: int, sender: threading.Thread, progress) -> int:
    """Show datagrams as they arrive, until EXPECT have, or the replay is
    over and DRAIN_S more seconds have passed."""
    got, drain_until = 0, None
    while got < expect:
        for datagram in listener.datagrams(timeout=0.1):
            got += 1
            progress("  " + view.line(datagram))
        if not sender.is_alive():
            drain_until = drain_until or time.monotonic() + DRAIN_S
            if time.monotonic() >= drain_until:
                break
    return got


def run(streams: int = 4, progress=print) -> DemoReport:
    swept = lab_mod.sweep_stale()
    if swept:
        progress(f"removed {len(swept)} namespaces left by killed runs")
    with lab_mod.Lab() as lab:
        progress(f"lab: {lab.peer.netns}/{lab.peer.ifname} ({lab.peer.ipv4}) "
                 f"==veth==> {lab.dut.netns}/{lab.dut.ifname} ({lab.dut.ipv4}, {lab.dut.ipv6})")
        t0 = time.monotonic()
        result = loader.attach(lab.dut.ifname, flows=True, netns=lab.dut.netns)
        progress(f"attached {lab.dut.ifname}: {result.mode} mode, program id {result.program_id} "
                 f"(compiled and loaded in {time.monotonic() - t0:.1f} s)")
        if result.note:
            progress(f"note: {result.note}")
        try:
            with listen.Listener(lab.dut.ifname, netns=lab.dut.netns) as listener:
                xsk = listener.sockets[0]
                progress(f"AF_XDP socket on {lab.dut.ifname} queue {xsk.queue}: {xsk.mode} mode"
                         + (f" ({xsk.mode_note})" if xsk.mode_note else "")
                         + ", registered in the program's XSKMAP")
                timeline = _timeline(lab, streams)
                packets = [t.packet for t in timeline]
                expected = traffic.expected_counters(packets, socket_registered=True)
                progress(f"replaying {streams} interleaved token streams at their real cadence, "
                         f"with malformed and ordinary traffic, from the peer: {len(packets)} "
                         f"packets over {timeline[-1].at:.2f} s; what the socket receives, "
                         "as it arrives:")
                view = listen.LiveView(keep_finished=True)
                played: dict = {}
                sender = _replay_in_background(lab, timeline, played)
                got = _consume(listener, view, expected["redirected"], sender, progress)
                sender.join()
                xsk_info = {**xsk.describe(), "statistics": xsk.statistics().to_json()}
            snap = stats.read(lab.dut.ifname, lab.dut.netns)
            # The replay is over: its streams' rates are averages, no live window.
            cadence = flows.report(lab.dut.ifname, lab.dut.netns, window=None)["flows"]
        finally:
            loader.detach(lab.dut.ifname, lab.dut.netns)
        return DemoReport(
            lab={"dut": asdict(lab.dut), "peer": asdict(lab.peer)},
            attach=result.to_json(),
            xsk=xsk_info,
            packets_sent=len(packets),
            counters=counters.flatten(snap["counters"]),
            expected=expected,
            datagrams_received=got,
            replay=played,
            streams=list(view.streams),
            flows=cadence,
        )


def check(report: DemoReport) -> None:
    if report.datagrams_received != report.expected["redirected"]:
        raise ZerolayerError(
            f"the AF_XDP socket received {report.datagrams_received} of the "
            f"{report.expected['redirected']} datagrams the program must redirect to it"
        )
    replay.require_judged(report.counters, report.expected)
