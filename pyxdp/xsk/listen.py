# SPDX-License-Identifier: Apache-2.0
"""`zerolayer listen`: the token frames zerolayer's XDP program redirects,
read from one AF_XDP socket per rx queue, a batch at a time.

Listener opens the sockets (every queue of the interface, or the ones asked
for) and yields one Received per batch: its frames as arrays
(Batch.frames(): the program has judged them, so nothing is judged again)
and the endpoints of its datagrams. Received.json_lines() are the lines of
docs/spec.md §5.7 for the whole batch; Received.datagrams() and LiveView
are for people. finish() stops listening and says, per queue, what was
delivered, lost (and why), and left unread (pyxdp.xsk.listen_report).
"""

import json
import select
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import mib
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.signals import ClosedOnExit
from pyxdp.proto.frames import Frame, FrameType
from pyxdp.proto.reassembly import Reassembled
from pyxdp.xdp import ownership
from pyxdp.xsk import busy_poll as busy_poll_mod
from pyxdp.xsk import published as xsk_published
from pyxdp.xsk import records
from pyxdp.xsk.frame_arrays import FrameArrays
from pyxdp.xsk.listen_report import ListenReport, QueueReport, QueueTally
from pyxdp.xsk.sizing import DEFAULT_FRAMES, DEFAULT_RING_SIZE
from pyxdp.xsk.socket import XskSocket

ATTACHMENT_CHECK_S = 1.0  # while idle, look this often whether zerolayer is still attached
# Descriptors taken per ring read: big enough that the per-batch cost of
# the numpy walk is spread thin, small enough to print promptly.
RECV_BATCH = 1024


@dataclass(frozen=True)
class Datagram:
    src: str  # "addr:port", IPv6 in brackets
    dst: str
    queue: int
    frames: list[Frame]


@dataclass(frozen=True)
class Received:
    """One batch of one queue; its views are valid until the next is asked for."""

    queue: int
    frames: FrameArrays
    sources: list[str]  # by datagram index in the batch
    destinations: list[str]

    def json_lines(self) -> list[str]:
        return records.json_lines(self.frames, self.sources, self.destinations, self.queue)

    def datagrams(self) -> list[Datagram]:
        """The frames grouped by datagram, payloads copied out of UMEM."""
        out: list[Datagram] = []
        current = -1
        for d, (ftype, view) in zip(self.frames.datagram.tolist(), self.frames):
            if d != current:
                current = d
                out.append(Datagram(self.sources[d], self.destinations[d], self.queue, []))
            out[-1].frames.append(Frame(ftype, bytes(view)))
        return out


def _datagrams_in(frames: FrameArrays) -> int:
    """How many datagrams FRAMES touch (its datagram indexes are sorted)."""
    return 1 + int(np.count_nonzero(np.diff(frames.datagram))) if len(frames) else 0


class Listener(ClosedOnExit):
    """AF_XDP sockets on QUEUES of IFNAME (default: all), registered with the
    zerolayer program attached there, each with FRAMES UMEM chunks and an RX
    ring of RX_SIZE (the defaults hold a 20,000-datagram burst: see
    pyxdp.xsk.sizing). Use as a context manager."""

    def __init__(self, ifname: str, queues=None, *, netns: str | None = None,
                 frames: int = DEFAULT_FRAMES, rx_size: int = DEFAULT_RING_SIZE,
                 **socket_options):
        self.ifname, self.netns = ifname, netns
        ins = ownership.require_ours(ifname, netns)
        self.queues = sorted(set(queues)) if queues else list(range(ins.state.rx_queues))
        self.sockets: list[XskSocket] = []
        self.tallies = {q: QueueTally() for q in self.queues}
        self._poll = select.poll()
        try:
            for q in self.queues:
                xsk = XskSocket(ifname, q, netns=netns, frames=frames, rx_size=rx_size,
                                **socket_options)
                self.sockets.append(xsk)
                self._poll.register(xsk.fileno(), select.POLLIN)
            self._busy_polled_before = self._busy_polled_packets()
            self._publish()
        except BaseException:
            self.close()
            raise

    @property
    def mode(self) -> str | None:
        return self.sockets[0].mode

    def notes(self) -> list[str]:
        """What a user should know before trusting the output (the same
        for every queue)."""
        return self.sockets[0].notes()

    def busy_poll(self) -> dict | None:
        """What busy polling holds (every queue's socket asked alike) and
        the queues the kernel busy-polls (their socket has a NAPI id);
        None when not asked for."""
        state = self.sockets[0].busy_poll
        if state is None:
            return None
        return {**state.to_json(),
                "polled_queues": [xsk.queue for xsk in self.sockets if xsk.busy_polling],
                "busy_polled_packets": self._busy_polled_packets() - self._busy_polled_before}

    def _busy_polled_packets(self) -> int:
        """The kernel's count of packets busy polling took in (TcpExt
        BusyPollRxPackets) in the interface's namespace: a socket tied to a
        NAPI context still gets every packet from interrupts while its
        reader sleeps, and only this says which way they came."""
        with netns_mod.entered(self.netns):
            return mib.read("TcpExt", "netstat").get("BusyPollRxPackets", 0)

    def sizing(self) -> dict:
        """The memory each queue's socket holds (every queue's is alike)."""
        xsk = self.sockets[0]
        return {"frames": xsk.frames, "chunk_size": xsk.chunk_size, "ring_size": xsk.rx_size,
                "bytes_per_queue": xsk.memory_bytes}

    def receive(self, *, count: int | None = None,
                timeout: float | None = None) -> Iterator[Received]:
        """Yield batches as they arrive, for TIMEOUT seconds (None: until
        interrupted) or until they hold COUNT frames (the last batch cut to
        fit). Raises ZerolayerError if zerolayer is detached meanwhile."""
        if count is not None and count <= 0:
            return
        left = count
        for batch in self._batches(timeout):
            tally = self.tallies[batch.queue]
            arrays = batch.frames()
            tally.broken += len(arrays.broken)
            whole = len(batch) - len(arrays.broken)
            if left is not None and len(arrays) > left:
                arrays = arrays.head(left)
            delivered = _datagrams_in(arrays)
            tally.datagrams += delivered
            tally.frames += len(arrays)
            tally.unread += whole - delivered
            yield Received(batch.queue, arrays, batch.sources(), batch.destinations())
            if left is not None:
                left -= len(arrays)
                if left == 0:
                    return

    def datagrams(self, *, count: int | None = None,
                  timeout: float | None = None) -> Iterator[Datagram]:
        """receive(), one Datagram at a time (payloads copied)."""
        for received in self.receive(count=count, timeout=timeout):
            yield from received.datagrams()

    def _batches(self, timeout: float | None):
        deadline = None if timeout is None else time.monotonic() + timeout
        next_check = time.monotonic() + ATTACHMENT_CHECK_S
        next_publish = time.monotonic() + xsk_published.PUBLISH_EVERY_S
        while True:
            idle = True
            for xsk in self.sockets:
                with xsk.recv(RECV_BATCH) as batch:
                    if batch:
                        idle = False
                        yield batch
            now = time.monotonic()
            if now >= next_publish:
                self._publish()
                next_publish = now + xsk_published.PUBLISH_EVERY_S
            if deadline is not None and now >= deadline:
                return
            if idle:
                if now >= next_check:
                    self._check_attached()
                    next_check = now + ATTACHMENT_CHECK_S
                wait = ATTACHMENT_CHECK_S
                if deadline is not None:
                    wait = min(deadline - now, wait)
                if not self._busy_wait(wait):
                    self._poll.poll(max(0, int(wait * 1000)))

    def _busy_wait(self, wait: float) -> bool:
        """With busy polling, kick the sockets the kernel busy-polls and look
        again, for up to their busy-poll time, before sleeping in poll():
        poll() itself does not busy-poll (pyxdp/xsk/busy_poll.py)."""
        polled = [xsk for xsk in self.sockets if xsk.busy_polling]
        if not polled:
            return False
        spin = min(wait, max(xsk.busy_poll_s for xsk in polled))
        return busy_poll_mod.spin([xsk.kick for xsk in polled],
                                  lambda: bool(self._poll.poll(0)), spin)

    def _check_attached(self) -> None:
        # Ours is not enough: after a detach and a fresh attach, the new
        # program has a new socket map that these sockets are not in. An
        # in-place upgrade keeps the pinned map, and the sockets with it.
        try:
            ins = ownership.inspect(self.ifname, self.netns)
        except ZerolayerError as exc:  # the interface (or its namespace) went away
            raise ZerolayerError(f"stopped listening on {self.ifname}: {exc}") from None
        if not ins.ours or ins.program is None or \
                self.sockets[0].xsks_map_id not in ins.program.map_ids:
            raise ZerolayerError(f"zerolayer was detached from {self.ifname} while listening")

    def finish(self) -> ListenReport:
        """Stop listening and report. The sockets leave the program's map
        first, so the queues' datagrams go to the kernel from here on and
        the counts below are final; what the rings still hold was received
        but not delivered, and is counted as unread."""
        for xsk in self.sockets:
            xsk.unregister()
        for xsk in self.sockets:
            while True:
                with xsk.recv(xsk.rx_size) as batch:
                    if not batch:
                        break
                    self.tallies[xsk.queue].unread += len(batch)
        return ListenReport(
            interface=self.ifname, netns=self.netns, mode=self.mode, sizing=self.sizing(),
            busy_poll=self.busy_poll(),
            queues=[QueueReport(xsk.queue, xsk.mode, self.tallies[xsk.queue], xsk.statistics())
                    for xsk in self.sockets],
        )

    def statistics(self):
        return {xsk.queue: xsk.statistics() for xsk in self.sockets}

    def _publish(self) -> None:
        """For the exporter: the kernel may not show these to anyone else.
        Listening matters more than publishing: a failed write is skipped."""
        for xsk in self.sockets:
            try:
                xsk_published.publish(xsk)
            except OSError:
                pass

    def close(self) -> None:
        for xsk in self.sockets:
            xsk_published.withdraw(xsk)
            xsk.close()


def queue_list(queues: list[int]) -> str:
    """'0', '0-3' or '0,2'."""
    if len(queues) > 1 and queues == list(range(queues[0], queues[-1] + 1)):
        return f"{queues[0]}-{queues[-1]}"
    return ",".join(map(str, queues))


class LiveView:
    """Datagrams as lines for people, each flow's stream reassembled: the
    REQUEST's prompt, the TOKEN text as it comes, and on DONE the whole text.
    A flow's stream ends at DONE (the next REQUEST starts a new one); ended
    streams are kept only with KEEP_FINISHED, so a long listen stays small."""

    def __init__(self, keep_finished: bool = False):
        self._open: dict[str, Reassembled] = {}
        self._keep = keep_finished
        self.finished: list[Reassembled] = []

    @property
    def streams(self) -> list[Reassembled]:
        return self.finished + list(self._open.values())

    def line(self, datagram: Datagram) -> str:
        parts, tokens = [], ""
        for frame in datagram.frames:
            stream = self._open.setdefault(datagram.src, Reassembled(datagram.src))
            stream.add(frame)
            if frame.type is FrameType.TOKEN:
                tokens += frame.payload.decode("utf-8", errors="replace")
                continue
            if tokens:
                parts.append(_quoted(tokens))
                tokens = ""
            if frame.type is FrameType.REQUEST:
                parts.append(f"REQUEST {_quoted(stream.prompt)}")
            elif frame.type is FrameType.DONE:
                parts.append(f"DONE ({stream.tokens} tokens): {_quoted(stream.text)}")
                del self._open[datagram.src]
                if self._keep:
                    self.finished.append(stream)
            else:
                parts.append(frame.type.name)
        if tokens:
            parts.append(_quoted(tokens))
        return f"{datagram.src:<24} q{datagram.queue}  " + "  ".join(parts)


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
