"""`zerolayer listen`: the token frames zerolayer's XDP program redirects,
read from one AF_XDP socket per rx queue.

Listener opens the sockets (every queue of the interface, or the ones
asked for) and yields Datagrams in arrival order per queue; each holds the
token frames of one UDP datagram. record() is the JSON line of docs/spec.md
§5.7 for one frame, and LiveView turns datagrams into lines for people,
reassembling each flow's stream (pyxdp.proto.streams).
"""

import base64
import json
import select
import time
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.kernel.signals import ClosedOnExit
from pyxdp.proto.datagram import decode_datagram
from pyxdp.proto.frames import Frame, FrameError, FrameType
from pyxdp.proto.streams import Stream
from pyxdp.xdp import ownership
from pyxdp.xsk import published as xsk_published
from pyxdp.xsk.socket import XskSocket, XskStatistics

ATTACHMENT_CHECK_S = 1.0  # while idle, look this often whether zerolayer is still attached


@dataclass(frozen=True)
class Datagram:
    src: str  # "addr:port", IPv6 in brackets
    dst: str
    queue: int
    frames: list[Frame]


def record(datagram: Datagram, frame: Frame) -> dict:
    """One frame as `zerolayer listen --json` prints it."""
    out: dict[str, str | int] = {"src": datagram.src, "dst": datagram.dst, "type": frame.type.label}
    try:
        out["payload"] = frame.payload.decode("utf-8")
    except UnicodeDecodeError:
        out["payload_b64"] = base64.b64encode(frame.payload).decode("ascii")
    out["queue"] = datagram.queue
    return out


class Listener(ClosedOnExit):
    """AF_XDP sockets on QUEUES of IFNAME (default: all), registered with the
    zerolayer program attached there. Use as a context manager."""

    def __init__(self, ifname: str, queues=None, *, netns: str | None = None, **socket_options):
        self.ifname, self.netns = ifname, netns
        ins = ownership.require_ours(ifname, netns)
        self.queues = sorted(set(queues)) if queues else list(range(ins.state.rx_queues))
        self.sockets: list[XskSocket] = []
        self._poll = select.poll()
        # Datagrams the program redirected that pyxdp.proto.frames cannot decode:
        # the C walker and the reference judge disagree (a bug). Counted.
        self.undecodable = 0
        try:
            for q in self.queues:
                xsk = XskSocket(ifname, q, netns=netns, **socket_options)
                self.sockets.append(xsk)
                self._poll.register(xsk.fileno(), select.POLLIN)
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

    def datagrams(self, *, count: int | None = None, timeout: float | None = None):
        """Yield Datagrams as they arrive, for TIMEOUT seconds (None: until
        interrupted) or until they hold COUNT frames (the last one cut to
        fit). Raises ZerolayerError if zerolayer is detached meanwhile."""
        if count is not None and count <= 0:
            return
        left = count
        for datagram in self._arrivals(timeout):
            if left is not None:
                if len(datagram.frames) > left:
                    datagram = Datagram(datagram.src, datagram.dst, datagram.queue,
                                        datagram.frames[:left])
                left -= len(datagram.frames)
            yield datagram
            if left == 0:
                return

    def _arrivals(self, timeout: float | None):
        deadline = None if timeout is None else time.monotonic() + timeout
        next_check = time.monotonic() + ATTACHMENT_CHECK_S
        next_publish = time.monotonic() + xsk_published.PUBLISH_EVERY_S
        while True:
            idle = True
            for xsk in self.sockets:
                with xsk.recv() as batch:
                    if batch:
                        idle = False
                        yield from self._decode(batch)
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
                self._poll.poll(max(0, int(wait * 1000)))

    def _decode(self, batch):
        for i in range(len(batch)):
            try:
                found = decode_datagram(bytes(batch.payload(i)))
            except FrameError:
                self.undecodable += 1
                continue
            yield Datagram(batch.source(i), batch.destination(i), batch.queue, found)

    def _check_attached(self) -> None:
        # Ours is not enough: after a detach and a fresh attach, the new
        # program has a new socket map that these sockets are not in. An
        # in-place upgrade keeps the pinned map, and the sockets with it.
        ins = ownership.inspect(self.ifname, self.netns)
        if not ins.ours or ins.program is None or \
                self.sockets[0].xsks_map_id not in ins.program.map_ids:
            raise ZerolayerError(f"zerolayer was detached from {self.ifname} while listening")

    def statistics(self) -> dict[int, XskStatistics]:
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
        self._open: dict[str, Stream] = {}
        self._keep = keep_finished
        self.finished: list[Stream] = []

    @property
    def streams(self) -> list[Stream]:
        return self.finished + list(self._open.values())

    def line(self, datagram: Datagram) -> str:
        parts, tokens = [], ""
        for frame in datagram.frames:
            stream = self._open.setdefault(datagram.src, Stream(datagram.src))
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
