# SPDX-License-Identifier: Apache-2.0
"""What `zerolayer listen` says when it stops (docs/spec.md §5.7): per
queue, the datagrams and frames delivered, those the socket lost and why
(the kernel's XDP_STATISTICS), those broken and those left unread."""

from dataclasses import dataclass

from pyxdp.xsk.afxdp import XskStatistics


@dataclass
class QueueTally:
    """Counted by the listener as batches go by."""

    datagrams: int = 0  # delivered, whole or (the last one under --count) in part
    frames: int = 0  # delivered
    # Redirected datagrams that break §1.4: the C walker and this one
    # disagree, a bug. Never delivered.
    broken: int = 0
    # Received by the socket, never delivered: past --count, or still in the
    # RX ring when listening stopped.
    unread: int = 0


@dataclass(frozen=True)
class QueueReport:
    queue: int
    mode: str | None
    tally: QueueTally
    statistics: XskStatistics

    @property
    def lost(self) -> int:
        return self.statistics.lost

    def lost_by_reason(self) -> dict[str, int | None]:
        return self.statistics.lost_by_reason(self.mode or "copy")

    def to_json(self) -> dict:
        return {"queue": self.queue, "frames": self.tally.frames,
                "datagrams": self.tally.datagrams, "lost": self.lost,
                "lost_by_reason": self.lost_by_reason(), "broken": self.tally.broken,
                "unread": self.tally.unread, "statistics": self.statistics.to_json()}

    def loss_text(self) -> str:
        """'queue 0 lost 12 (rx_ring_full 10, no_free_chunk 2)'."""
        why = ", ".join(f"{reason} {n}" for reason, n in self.lost_by_reason().items()
                        if n)
        return f"queue {self.queue} lost {self.lost} ({why})"


@dataclass(frozen=True)
class ListenReport:
    interface: str
    netns: str | None
    mode: str | None
    sizing: dict  # Listener.sizing()
    queues: list[QueueReport]
    busy_poll: dict | None = None  # Listener.busy_poll()

    def total(self, key: str) -> int:
        return sum(q.to_json()[key] for q in self.queues)

    def to_json(self) -> dict:
        return {"interface": self.interface, "netns": self.netns, "mode": self.mode,
                "frames": self.total("frames"), "datagrams": self.total("datagrams"),
                "lost": self.total("lost"), "broken": self.total("broken"),
                "unread": self.total("unread"), "sizing": self.sizing,
                "busy_poll": self.busy_poll, "queues": [q.to_json() for q in self.queues]}

    def text(self, where: str) -> str:
        """One line for people; WHERE names the interface and queues."""
        plural = "s" if len(self.queues) > 1 else ""
        out = (f"{self.total('frames')} frames in {self.total('datagrams')} datagrams on {where}, "
               f"{self.mode} mode; {self.total('lost')} lost by the AF_XDP socket{plural}")
        out += "".join(f"; {q.loss_text()}" for q in self.queues if q.lost)
        if self.total("unread"):
            out += (f"; {self.total('unread')} datagrams received but not delivered "
                    "(past --count, or still queued when listening stopped)")
        if self.total("broken"):
            out += f"; {self.total('broken')} datagrams did not decode (a bug: please report)"
        if self.busy_poll is not None:
            out += (f"; busy polling took in {self.busy_poll['busy_polled_packets']} packets "
                    "in the namespace, interrupts the rest")
        return out
