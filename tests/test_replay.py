# SPDX-License-Identifier: Apache-2.0
"""Replay: transcripts and captures become timelines, and a replay into a
real lab reproduces exactly the counters the reference judge predicts."""

import json
from pathlib import Path

import pytest

from pyxdp.errors import ZerolayerError
from pyxdp.lab import replay, traffic
from pyxdp.lab import veth_lab as lab_mod
from pyxdp.proto import counters, datagram, frames
from pyxdp.proto.frames import FrameType
from pyxdp.xdp import loader, stats
from support.xdp_helpers import one_line_error

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ROUTE = lab_mod.Lab()  # not entered: only its fixed addresses, as packets carry them


def line(**obj) -> str:
    base = {"request": {"t": 10.0, "body": {"prompt": "hi"}}, "tokens": []}
    base.update(obj)
    return json.dumps(base)


def payloads(timeline) -> list[bytes]:
    from pyxdp.proto.judge import classify_packet

    return [classify_packet(t.packet).payload for t in timeline]


# --- transcripts ------------------------------------------------------------------

def test_a_conversation_becomes_request_token_groups_and_done():
    src = [line(tokens=[{"t": 10.5, "text": "a"}, {"t": 10.5, "text": "b"},
                        {"t": 10.75, "text": "c"}],
                done={"t": 11.0, "usage": {"completion_tokens": 3}})]
    timeline = replay.packets_from_transcript(src, ROUTE)
    assert [t.at for t in timeline] == [0.0, 0.5, 0.75, 1.0]
    decoded = [datagram.decode_datagram(p) for p in payloads(timeline)]
    assert decoded[0] == [frames.Frame(FrameType.REQUEST, b'{"prompt":"hi"}')]
    assert decoded[1] == [frames.Frame(FrameType.TOKEN, b"a"), frames.Frame(FrameType.TOKEN, b"b")]
    assert decoded[2] == [frames.Frame(FrameType.TOKEN, b"c")]
    assert decoded[3] == [frames.Frame(FrameType.DONE, b'{"completion_tokens":3}')]


def test_token_groups_split_at_max_frames_and_a_cut_short_stream_has_no_done():
    tokens = [{"t": 10.1, "text": "x"}] * (frames.MAX_FRAMES + 3)
    timeline = replay.packets_from_transcript([line(tokens=tokens)], ROUTE)
    sizes = [len(datagram.decode_datagram(p)) for p in payloads(timeline)]
    assert sizes == [1, frames.MAX_FRAMES, 3]  # no DONE frame at the end


def test_conversations_interleave_on_one_clock_from_the_earliest():
    src = [line(request={"t": 100.2, "body": {}}, tokens=[{"t": 100.3, "text": "late"}]),
           line(request={"t": 100.0, "body": {}}, tokens=[{"t": 100.25, "text": "early"}],
                sport=41000, ipv6=True)]
    timeline = replay.packets_from_transcript(src, ROUTE)
    assert [round(t.at, 6) for t in timeline] == [0.0, 0.2, 0.25, 0.3]
    from scapy.layers.l2 import Ether

    first = Ether(timeline[0].packet)
    assert first["UDP"].sport == 41000 and first.haslayer("IPv6")
    assert Ether(timeline[1].packet)["UDP"].sport == replay.FIRST_SPORT  # line 1's default


def test_streams_copy_each_conversation_onto_its_own_flow():
    src = [line(tokens=[{"t": 10.1, "text": "a"}]), line(tokens=[{"t": 10.2, "text": "b"}])]
    timeline = replay.packets_from_transcript(src, ROUTE, streams=3)
    from scapy.layers.l2 import Ether

    sports = sorted({Ether(t.packet)["UDP"].sport for t in timeline})
    assert sports == [40000 + i for i in range(6)]
    assert len(timeline) == 3 * 4
    assert [t.at for t in timeline] == sorted(t.at for t in timeline)


@pytest.mark.parametrize("text, message", [
    ("{not json", "t.jsonl:1: not JSON"),
    ("[1, 2]", "must be a JSON object"),
    (json.dumps({"tokens": []}), "the request needs a time"),
    (line(tokens=[{"t": "soon", "text": "a"}]), "token 0 needs a time"),
    (line(tokens=[{"t": 10.1}]), "token 0 needs a \"text\" string"),
    (line(tokens=[{"t": 10.5, "text": "a"}, {"t": 10.2, "text": "b"}]), "token 1 is earlier"),
    (line(tokens=[{"t": 9.0, "text": "a"}]), "token 0 is earlier"),
    (line(tokens=[{"t": 10.5, "text": "a"}], done={"t": 10.1}), "\"done\" is earlier"),
    (line(sport=70000), "\"sport\" must be a UDP port"),
    (line(id="big", tokens=[{"t": 10.1, "text": "x" * 2000}]),
     "t.jsonl:1 (big): a 2005-byte frame"),
    ("", "holds no conversations"),
])
def test_bad_transcripts_name_the_line_and_the_problem(tmp_path, text, message):
    path = tmp_path / "t.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(ZerolayerError, match=message.replace("(", r"\(").replace(")", r"\)")):
        replay.packets_from_transcript(path, ROUTE)


def test_too_many_streams_for_the_port_range_is_refused():
    with pytest.raises(ZerolayerError, match="run out of source ports"):
        replay.packets_from_transcript([line(sport=65000)], ROUTE, streams=600)


# --- captures -------------------------------------------------------------------------

def test_a_capture_round_trips_byte_for_byte_with_its_times(tmp_path):
    packets = [bytes(p) for p in traffic.mixed_traffic(ROUTE, streams=2)]
    timeline = [replay.Timed(0.01 * i, p) for i, p in enumerate(packets)]
    path = tmp_path / "t.pcap"
    replay.save_pcap(timeline, path, start=1_700_000_000.0)
    assert replay.source_format(path) == "pcap"
    back = replay.packets_from_pcap(path)
    assert [t.packet for t in back] == packets
    assert [round(t.at, 5) for t in back] == [round(t.at, 5) for t in timeline]
    doubled = replay.packets_from_pcap(path, streams=2)
    assert [t.packet for t in doubled] == [p for p in packets for _ in range(2)]


def test_captures_that_cannot_be_replayed_faithfully_are_refused(tmp_path):
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    pkt = Ether(next(iter(traffic.mixed_traffic(ROUTE, streams=1))).build())
    cooked = tmp_path / "cooked.pcap"
    wrpcap(str(cooked), [pkt], linktype=113)  # Linux cooked capture, as from -i any
    with pytest.raises(ZerolayerError, match="not Ethernet"):
        replay.packets_from_pcap(cooked)
    short = tmp_path / "short.pcap"
    pkt.wirelen = len(pkt) + 100
    wrpcap(str(short), [pkt])
    with pytest.raises(ZerolayerError, match="captured truncated"):
        replay.packets_from_pcap(short)
    empty = tmp_path / "empty.pcap"
    replay.save_pcap([], empty)
    with pytest.raises(ZerolayerError, match="holds no packets"):
        replay.packets_from_pcap(empty)


# --- into a lab: exact counters ----------------------------------------------------------

def assert_exact(report, timeline):
    expected = traffic.expected_counters([t.packet for t in timeline])
    assert report.expected == expected
    assert report.counters == expected, {
        k: (report.counters[k], expected[k]) for k in expected if report.counters[k] != expected[k]}
    assert report.result.sent == len(timeline)


@pytest.mark.root
def test_a_small_capture_replays_to_exact_counters(tmp_path):
    conversations = replay.packets_from_transcript(EXAMPLES / "transcript.jsonl", ROUTE)
    extras = [replay.Timed(0.02 * i, bytes(p)) for i, p in enumerate(traffic.mixed_traffic(ROUTE))]
    path = tmp_path / "small.pcap"
    replay.save_pcap(replay.in_parallel([conversations, extras]), path)
    report = replay.replay_in_lab(path, streams=2, speed=8)
    assert_exact(report, replay.packets_from_pcap(path, streams=2))
    c = report.counters
    # one datagram per malformed reason, in each of the two streams
    assert c["other"] and c["fragments"] and c["token_datagrams"]
    assert c["malformed_dropped"] == 2 * len(counters.REASONS)
    last = max(t.at for t in extras + conversations)
    assert report.result.span_s == pytest.approx(last / 8, abs=1e-5)


@pytest.mark.root
def test_a_small_transcript_replays_to_exact_counters():
    path = EXAMPLES / "transcript.jsonl"
    report = replay.replay_in_lab(path, streams=3, speed=10)
    assert_exact(report, replay.packets_from_transcript(path, ROUTE, streams=3))
    assert report.counters["frames.request"] == 3 * 4 and report.counters["frames.done"] == 3 * 3


@pytest.mark.root
def test_the_shipped_example_capture_replays_to_exact_counters():
    path = EXAMPLES / "tokens.pcap"
    report = replay.replay_in_lab(path, speed=None)
    assert_exact(report, replay.packets_from_pcap(path))
    assert report.result.speed is None and report.result.late_max_ms == 0.0


@pytest.mark.root
def test_replay_into_a_named_interface_through_the_cli(cli, lab, tmp_path):
    """A user's interface, not a lab the replay built: the peer end of ours,
    with zerolayer on the other end to count."""
    transcript = tmp_path / "v4.jsonl"
    transcript.write_text("\n".join(
        ln for ln in (EXAMPLES / "transcript.jsonl").read_text().splitlines()
        if not json.loads(ln).get("ipv6")) + "\n")
    loader.attach(lab.dut.ifname, netns=lab.dut.netns)
    try:
        proc = cli("replay", transcript, "--iface", lab.peer.ifname, "--netns", lab.peer.netns,
                   "--dst", lab.dut.ipv4, "--speed", "20", "--streams", "2", "--json")
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        expected = traffic.expected_counters(
            [t.packet for t in replay.packets_from_transcript(transcript, lab, streams=2)])
        assert result["sent"] == expected["packets"] and result["streams"] == 2
        proc = cli("replay", EXAMPLES / "tokens.pcap", "--iface", lab.peer.ifname,
                   "--netns", lab.peer.netns, "--topspeed")
        assert proc.returncode == 0 and "at top speed" in proc.stdout, proc.stderr
        for key, value in traffic.expected_counters(
                [t.packet for t in replay.packets_from_pcap(EXAMPLES / "tokens.pcap")]).items():
            expected[key] += value
        seen = counters.flatten(stats.read(lab.dut.ifname, lab.dut.netns)["counters"])
        assert seen == expected
    finally:
        loader.detach(lab.dut.ifname, lab.dut.netns)


@pytest.mark.root
def test_replay_cli_errors_are_one_line(cli, lab, tmp_path):
    transcript = EXAMPLES / "transcript.jsonl"
    peer = ["--iface", lab.peer.ifname, "--netns", lab.peer.netns]
    assert "needs --dst" in one_line_error(cli("replay", transcript, *peer))
    assert "no IPv6 destination" in one_line_error(
        cli("replay", transcript, *peer, "--dst", lab.dut.ipv4))
    assert "neighbour entry for 198.18.0.9 on peer0" in one_line_error(
        cli("replay", transcript, *peer, "--dst", "198.18.0.9"))
    assert "not an IP address" in one_line_error(cli("replay", transcript, *peer, "--dst", "dut"))
    assert "no interface named 'nope0'" in one_line_error(
        cli("replay", EXAMPLES / "tokens.pcap", "--iface", "nope0", "--netns", lab.peer.netns))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"request": {"t": 1}}\n{"request": 3}\n')
    assert "bad.jsonl:2: the request needs a time" in one_line_error(cli("replay", bad))
    for usage in (("--dst", "1.2.3.4"), ("--speed", "0"), ("--streams", "0")):
        proc = cli("replay", transcript, *usage)
        assert proc.returncode == 2, proc.stderr
