# SPDX-License-Identifier: Apache-2.0
"""Preferred busy polling on zerolayer's AF_XDP sockets (pyxdp/xsk/busy_poll.py):
the options as the kernel holds them, read on the socket's fd; frames the
peer's kernel stack sends received whole with busy polling asked for; a
refusal as one note; `zerolayer listen --busy-poll`; and whether the kernel
can busy-poll the socket at all (a veth gives it no NAPI id from 6.13)."""

import json
import os
import socket

import pytest

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import release
from pyxdp.proto import frames
from pyxdp.proto.frames import FrameType
from pyxdp.xsk import busy_poll
from pyxdp.xsk.afxdp import AF_XDP
from pyxdp.xsk.busy_poll import BusyPoll
from pyxdp.xsk.socket import XskSocket
from support.listen_runner import Listening, summary_of

ROUNDS, PER_ROUND = 10, 50


def kernel_option(xsk: XskSocket, option: int) -> int:
    """getsockopt(SOL_SOCKET, OPTION) on the socket's own fd, through a
    duplicate: what the kernel holds, not what the Python object says."""
    with socket.socket(AF_XDP, socket.SOCK_RAW, 0, fileno=os.dup(xsk.fileno())) as dup:
        return dup.getsockopt(socket.SOL_SOCKET, option)


def no_napi_notes(notes: list[str]) -> list[str]:
    return [n for n in notes if n.startswith(("busy polling cannot happen",
                                              "busy polling does not happen"))]


def peer_sender(lab) -> socket.socket:
    """A UDP socket of the peer namespace's own stack, aimed at dut0's token port."""
    with lab.in_peer():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((lab.dut.ipv4, frames.DEFAULT_PORT))
    return sock


@pytest.mark.root
@pytest.mark.parametrize("wanted", [BusyPoll(usec=50, budget=32, prefer=True),
                                    BusyPoll(usec=30, budget=16, prefer=False)],
                         ids=["preferred", "not-preferred"])
def test_the_options_are_read_back_from_the_kernel(attached, wanted):
    lab = attached
    with XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, busy_poll=wanted) as xsk:
        assert kernel_option(xsk, busy_poll.SO_BUSY_POLL) == wanted.usec
        assert kernel_option(xsk, busy_poll.SO_PREFER_BUSY_POLL) == int(wanted.prefer)
        napi = kernel_option(xsk, busy_poll.SO_INCOMING_NAPI_ID)
        assert xsk.describe()["busy_poll"] == {"usec": wanted.usec, "budget": wanted.budget,
                                               "prefer": wanted.prefer, "napi_id": napi or None}
        assert xsk.busy_polling == bool(napi)
        assert not any(n.startswith("busy polling: the kernel refused") for n in xsk.notes())
    with XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns) as plain:
        assert plain.describe()["busy_poll"] is None and plain.busy_poll is None
        assert not no_napi_notes(plain.notes())


@pytest.mark.root
def test_frames_from_the_peers_stack_arrive_whole_with_busy_polling(attached):
    """Rounds of datagrams from a real UDP socket in the peer namespace,
    each read with recv(timeout) as it arrives: every one, in order, none
    lost. On a veth the kernel cannot busy-poll the socket from 6.13 (no
    NAPI id), and the notes say so, once."""
    lab = attached
    sender = peer_sender(lab)
    got: list[bytes] = []
    try:
        with XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns, busy_poll=BusyPoll()) as xsk:
            for r in range(ROUNDS):
                for i in range(PER_ROUND):
                    sender.send(frames.encode(FrameType.TOKEN, f"token {r * PER_ROUND + i}"))
                want = (r + 1) * PER_ROUND
                while len(got) < want:
                    with xsk.recv(256, timeout=5.0) as batch:
                        assert batch, f"nothing within 5 s after {len(got)} of {want}"
                        got.extend(bytes(batch.payload(i)) for i in range(len(batch)))
            assert xsk.statistics().lost == 0
            napi = kernel_option(xsk, busy_poll.SO_INCOMING_NAPI_ID)
            assert xsk.busy_polling == bool(napi)
            assert len(no_napi_notes(xsk.notes())) == (0 if napi else 1)
            if release.at_least(6, 13):  # veth links no NAPI context to its queues
                assert napi == 0 and no_napi_notes(xsk.notes()) == [
                    f"busy polling cannot happen on {lab.dut.ifname} (veth) queue 0: the socket "
                    "has no NAPI id, the driver links no NAPI context to the queue (veth never "
                    "does)"]
    finally:
        sender.close()
    assert got == [frames.encode(FrameType.TOKEN, f"token {n}")
                   for n in range(ROUNDS * PER_ROUND)]


@pytest.mark.root
def test_a_budget_the_kernel_refuses_is_one_note(attached):
    """The kernel takes a budget up to 65535 (EINVAL above): the socket
    keeps the rest of busy polling and says, in one line, what was refused."""
    lab = attached
    with XskSocket(lab.dut.ifname, 0, netns=lab.dut.netns,
                   busy_poll=BusyPoll(usec=40, budget=70000)) as xsk:
        refused = [n for n in xsk.notes() if n.startswith("busy polling: the kernel refused")]
        assert refused == ["busy polling: the kernel refused SO_BUSY_POLL_BUDGET=70000 "
                           f"({os.strerror(22)})"]
        assert kernel_option(xsk, busy_poll.SO_BUSY_POLL) == 40
        assert xsk.describe()["busy_poll"]["budget"] is None  # the kernel's own applies


@pytest.mark.root
def test_listen_busy_poll_reports_what_holds_and_receives_every_frame(attached):
    lab = attached
    count = 200
    listening = Listening(lab, "--busy-poll", 50, "--count", count, "--timeout", 60)
    sender = peer_sender(lab)
    try:
        assert "busy polling 50 µs, budget 64, preferred;" in listening.header[-1]
        for i in range(count):
            sender.send(frames.encode(FrameType.TOKEN, f"t{i}"))
        code, out, err = listening.finish()
    finally:
        sender.close()
        listening.kill()
    assert code == 0 and "Traceback" not in err, err
    assert [json.loads(line)["payload"] for line in out.splitlines()] == \
        [f"t{i}" for i in range(count)]
    summary = summary_of(err)
    assert (summary["frames"], summary["lost"], summary["unread"]) == (count, 0, 0)
    polled = summary["busy_poll"].pop("polled_queues")
    busy_polled = summary["busy_poll"].pop("busy_polled_packets")
    assert summary["busy_poll"] == {"usec": 50, "budget": 64, "prefer": True}
    if not polled:  # no NAPI context to poll: every packet came by interrupt
        assert busy_polled == 0
    notes = [line.removeprefix("note: ").strip() for line in listening.header]
    assert bool(no_napi_notes(notes)) == (polled == [])
    if release.at_least(6, 13):  # veth: no NAPI id for the socket, said in one note
        assert polled == [] and len(no_napi_notes(notes)) == 1


@pytest.mark.root
def test_listen_busy_poll_alone_asks_for_the_default(attached):
    lab = attached
    listening = Listening(lab, "--busy-poll", "--count", 1, "--timeout", 60, as_json=False)
    try:
        assert f"busy polling {busy_poll.DEFAULT_USEC} µs, budget 64, preferred;" in \
            listening.header[-1]
        peer_sender(lab).send(frames.encode(FrameType.TOKEN, "one"))
        code, out, err = listening.finish()
    finally:
        listening.kill()
    assert code == 0 and '"one"' in out, err


@pytest.mark.parametrize("value,error", [
    ("0", "Invalid value for '--busy-poll'"), ("abc", "Invalid value for '--busy-poll'"),
    (str(2**31), "Invalid value for '--busy-poll'"),
    ("-5", "No such option '-5'"),  # click takes an optional value only if it is not dashed
])
def test_listen_busy_poll_bad_values_are_usage_errors(cli, value, error):
    proc = cli("listen", "dut0", f"--busy-poll={value}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"Error: {error}")


@pytest.mark.parametrize("usec", [True, 2**31, 1.5])
def test_busy_poll_values_must_be_c_ints(usec):
    with pytest.raises(ZerolayerError, match="busy poll usec must be a 32-bit integer"):
        BusyPoll(usec=usec)


def test_spin_kicks_at_least_once_and_stops_when_ready():
    kicks: list[int] = []
    assert not busy_poll.spin([lambda: kicks.append(1)], lambda: False, 0.0)
    assert kicks == [1]
    ready = iter([False, False, True])
    assert busy_poll.spin([lambda: kicks.append(2)], lambda: next(ready), 60.0)
    assert kicks == [1, 2, 2, 2]
