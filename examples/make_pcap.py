# SPDX-License-Identifier: Apache-2.0
"""Regenerate examples/tokens.pcap: the conversations of transcript.jsonl,
plus one malformed datagram per reason and some ordinary traffic (ICMP, a
UDP datagram to another port, an IP fragment) from pyxdp.lab.traffic, between
the lab's addresses (fixed, so the capture replays into any lab).

    /opt/zerolayer/venv/bin/python examples/make_pcap.py
"""

from pathlib import Path

from pyxdp.lab import replay, traffic
from pyxdp.lab import veth_lab as lab

HERE = Path(__file__).parent
START = 1767225600.0  # the transcript's clock

route = lab.Lab()  # not entered: only its fixed addresses are used
conversations = replay.load(HERE / "transcript.jsonl", route)
spread = [replay.Timed(0.1 + 0.15 * i, bytes(p))
          for i, p in enumerate(traffic.non_token_packets(route))]
replay.save_pcap(replay.in_parallel([conversations, spread]), HERE / "tokens.pcap", START)
