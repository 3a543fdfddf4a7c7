# SPDX-License-Identifier: Apache-2.0
"""The live-frames generator: asked for N frames it sends exactly N, mixes
arrive in their exact proportions, and bad requests are refused before
anything is sent. Counted at dut0 by zerolayer's own counters."""

import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from pyxdp.errors import ZerolayerError
from pyxdp.lab import generator
from pyxdp.proto import counters, frames
from pyxdp.xdp import stats

pytestmark = pytest.mark.root




def read(lab) -> dict[str, int]:
    return counters.flatten(stats.read(lab.dut.ifname, lab.dut.netns)["counters"])


def counted_after(lab, send) -> dict[str, int]:
    """Counter deltas at dut0 caused by SEND()."""
    before = read(lab)
    send()
    return counters.delta(read(lab), before)


def veth_xmit(lab) -> dict[str, int]:
    """peer0's veth counters of frames handed to dut0's ring and refused by
    it (a full ring): every frame the generator transmits is one or the other."""
    out = subprocess.run(["ip", "netns", "exec", lab.peer.netns, "ethtool", "-S", lab.peer.ifname],
                         capture_output=True, text=True, check=True).stdout
    stats = dict(line.strip().rsplit(": ", 1) for line in out.splitlines()[1:])
    return {k: int(stats.get(f"tx_queue_0_{k}", 0)) for k in ("xdp_xmit", "xdp_xmit_errors")}


def token_packet(lab, frames_per_datagram=4, size=16) -> bytes:
    mix = generator.token_mix(lab, frames_per_datagram=frames_per_datagram, payload_sizes=[size])
    assert len(mix.templates) == 1
    return mix.templates[0]


@pytest.mark.parametrize("n", [1, 64, 1000, 250_003])
@pytest.mark.kernel
def test_asked_for_n_datagrams_sends_exactly_n(rig, n):
    lab, gen = rig
    got = counted_after(lab, lambda: gen.send(token_packet(lab), n))
    assert got["packets"] == got["token_datagrams"] == n
    assert got["frames.token"] == 4 * n


def test_paced_run_sends_exactly_n_in_chunks_and_reports_its_rate(rig):
    lab, gen = rig
    n, rate = 12_345, 50_000  # chunks of a tenth of a second: 5000, 5000, 2345
    runs = []
    got = counted_after(lab, lambda: runs.append(
        gen.run(generator.Mix.single(token_packet(lab)), n, rate=rate)))
    run = runs[0]
    assert got["token_datagrams"] == run.sent == n
    assert run.chunks == 3
    assert run.target_pps == rate and run.rate_pps > 0
    assert run.to_json()["rate_pps"] == round(n / run.elapsed_s, 1)


@pytest.mark.parametrize("n", [999, 10_007])
@pytest.mark.kernel
def test_a_mix_of_sizes_malformed_and_other_arrives_exactly(rig, n):
    lab, gen = rig
    mix = generator.token_mix(lab, frames_per_datagram=3, payload_sizes=(0, 40, 400),
                              malformed=0.02, other=0.05)
    got = counted_after(lab, lambda: gen.run(mix, n))
    assert got == mix.expected_counters(n)
    assert got["other"] and got["malformed_dropped"] and got["token_datagrams"]
    for reason in counters.REASONS:
        assert got[f"malformed.{reason}"] > 0


def test_a_mix_on_another_port_is_other_traffic_to_zerolayer(rig):
    lab, gen = rig
    mix = generator.token_mix(lab, port=9000, malformed=0.1)
    got = counted_after(lab, lambda: gen.run(mix, 500))
    assert got["other"] == got["packets"] == 500
    assert got == mix.expected_counters(500, ports=(frames.DEFAULT_PORT,))


def test_switching_between_mixes_rewinds_the_schedule(rig):
    lab, gen = rig
    first = generator.token_mix(lab, malformed=0.5)
    second = generator.token_mix(lab, frames_per_datagram=2, other=0.25)
    for mix, n in ((first, 7), (second, 13), (first, 7)):
        assert counted_after(lab, lambda mix=mix, n=n: gen.run(mix, n)) == mix.expected_counters(n)


def test_shares_become_exact_interleaved_counts(rig):
    lab, _ = rig
    mix = generator.token_mix(lab, payload_sizes=(8, 64), malformed=0.02, other=0.05)
    per_cycle = mix.counts(len(mix.schedule))
    assert len(mix.schedule) == generator.MIX_SLOTS
    # tokens (two sizes), every malformed reason, other
    assert per_cycle == [465, 465] + [4] * len(counters.REASONS) + [50]
    assert mix.counts(3 * len(mix.schedule) + 10) == [
        3 * c + mix.schedule[:10].count(i) for i, c in enumerate(per_cycle)]
    # spread out, not in bursts: no 50 slots in a row without an "other"
    other = [i for i, t in enumerate(mix.schedule) if t == len(per_cycle) - 1]
    assert max(b - a for a, b in zip(other, other[1:])) <= 25


def test_weighted_schedule_is_smooth():
    a, b = b"A" * 60, b"B" * 60
    mix = generator.Mix.weighted([(a, 3), (b, 1)])
    assert mix.schedule == (0, 0, 1, 0)
    assert mix.counts(10) == [8, 2]
    assert generator.Mix.weighted([(a, 5)]) == generator.Mix.single(a)


@pytest.mark.parametrize("kwargs, message", [
    ({"frames_per_datagram": 0}, "frames per datagram"),
    ({"frames_per_datagram": frames.MAX_FRAMES + 1}, "frames per datagram"),
    ({"malformed": 0.6, "other": 0.4}, "leave room for tokens"),
    ({"payload_sizes": []}, "payload sizes"),
])
def test_bad_mix_requests_are_refused(rig, kwargs, message):
    lab, _ = rig
    with pytest.raises(ZerolayerError, match=message):
        generator.token_mix(lab, **kwargs)


def test_what_cannot_be_sent_is_refused_before_sending(rig):
    lab, gen = rig
    too_big = generator.token_mix(lab, frames_per_datagram=2, payload_sizes=[740])
    before = read(lab)
    with pytest.raises(ZerolayerError, match="does not fit peer0's MTU"):
        gen.run(too_big, 10)
    with pytest.raises(ZerolayerError, match="batch size"):
        gen.send(token_packet(lab), 10, batch_size=0)
    with pytest.raises(ZerolayerError, match="rate"):
        gen.run(generator.Mix.single(token_packet(lab)), 10, rate=0)
    with pytest.raises(ZerolayerError, match="templates"):
        generator.Mix(tuple([b"x" * 60] * 17), tuple(range(17)))
    with pytest.raises(ZerolayerError, match="14-1536 bytes"):
        generator.Mix.single(b"short")
    assert counters.delta(read(lab), before)["packets"] == 0


def test_an_unknown_interface_is_one_clear_error(rig):
    lab, _ = rig
    with pytest.raises(ZerolayerError, match="no interface named 'nope0'"):
        generator.LiveGenerator("nope0", lab.peer.netns)


# --- signals ----------------------------------------------------------------------

SIGNAL_EVERY_S = 0.02
SIGNALS = 10


def run_under_signals(gen, mix, n: int, limit: int = SIGNALS) -> generator.GeneratorRun:
    """gen.run(MIX, N) in the calling thread while another thread sends it
    SIGUSR1 every SIGNAL_EVERY_S, at most LIMIT times. The sender is joined
    before this returns, so no signal goes to a thread that has ended."""
    target, stop = threading.get_ident(), threading.Event()

    def shoot():
        for _ in range(limit):
            if stop.wait(SIGNAL_EVERY_S):
                return
            signal.pthread_kill(target, signal.SIGUSR1)

    shooter = threading.Thread(target=shoot, name="sigusr1")
    shooter.start()
    try:
        return gen.run(mix, n)
    finally:
        stop.set()
        shooter.join()


@pytest.fixture
def sigusr1_handler():
    """A Python handler for SIGUSR1 (the default action would kill the
    process); the list it fills, one entry per signal handled."""
    handled: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, _frame: handled.append(signum))
    yield handled
    signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("where", ["main thread", "background thread"])
@pytest.mark.kernel
def test_signals_during_a_run_do_not_change_what_arrives(rig, sigusr1_handler, where):
    """A signal ends a live-frames test run early with EINTR; the generator
    sends the rest, so dut0 counts exactly N of the mix, in its proportions."""
    lab, gen = rig
    n = 1_500_000
    mix = generator.token_mix(lab, malformed=0.02, other=0.05)
    runs: list[generator.GeneratorRun] = []

    def send():
        if where == "main thread":
            runs.append(run_under_signals(gen, mix, n))
        else:
            with ThreadPoolExecutor(1) as pool:
                runs.append(pool.submit(run_under_signals, gen, mix, n).result())

    link_before = veth_xmit(lab)
    got = counted_after(lab, send)
    link_after = veth_xmit(lab)
    link = {k: link_after[k] - link_before[k] for k in link_after}
    assert runs[0].interrupted >= 1  # the kernel did cut calls short
    assert runs[0].sent == n
    # On the link first: what the program counted as run did leave peer0.
    assert link == {"xdp_xmit": n, "xdp_xmit_errors": 0}, runs[0]
    assert got == mix.expected_counters(n), (runs[0], link)


class Stop(Exception):
    pass


def test_a_handler_that_raises_still_ends_the_run(rig):
    """Retrying EINTR must not swallow what the handler raises (Ctrl-C)."""
    lab, gen = rig
    n = 20_000_000  # about 10 s flat out: the signal comes long before the end

    def stop(_signum, _frame):
        raise Stop()

    previous = signal.signal(signal.SIGUSR1, stop)
    try:
        before = read(lab)
        with pytest.raises(Stop):
            run_under_signals(gen, generator.Mix.single(token_packet(lab)), n, limit=1)
        sent = counters.delta(read(lab), before)["packets"]
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert sent < n
