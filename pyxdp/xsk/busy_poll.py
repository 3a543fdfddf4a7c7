# SPDX-License-Identifier: Apache-2.0
"""Preferred busy polling for AF_XDP sockets: the options asked for, what
the kernel holds after them, and the wait that makes busy polling happen.

What the kernel does with them (net/xdp/xsk.c, net/core/dev.c, as of 6.18):

- SO_BUSY_POLL (µs): with it set, every recvmsg and sendmsg on the socket
  runs one pass of the NAPI context the socket is tied to (sk_busy_loop,
  "nonblock": AF_XDP takes only MSG_DONTWAIT calls, a blocking one fails
  with EOPNOTSUPP). The driver's poll, and with it the XDP program and the
  redirect into the RX ring, then run in the reader's own context instead
  of a softirq after an interrupt. poll()/select()/epoll busy-poll only when
  the host-wide net.core.busy_poll is set, which zerolayer leaves alone:
  so the reader drives it, with a non-blocking recvfrom, the "kick" below.
- SO_PREFER_BUSY_POLL (Linux 5.11): the NAPI context prefers the busy
  poller; with the device's napi_defer_hard_irqs and gro_flush_timeout set
  its interrupt stays off while the reader keeps polling, and the timer
  takes over when it stops. In zero-copy mode a busy-polled socket's
  recvmsg also skips the driver wakeup, the pass having done its work.
- IRQ suspension (irq-suspend-timeout, Linux 6.13) is not used: the
  kernel suspends a NAPI context's interrupt only for an epoll context set
  to prefer busy polling (EPIOCSPARAMS), and these readers use no epoll.
- SO_BUSY_POLL_BUDGET (Linux 5.11): frames per pass (the kernel's default
  is 8). The kernel has no getsockopt for it: what is reported is what
  setsockopt accepted.

A socket busy-polls only once it has a NAPI id (SO_INCOMING_NAPI_ID), and
an AF_XDP socket gets one where the kernel can see the queue's NAPI
context: from Linux 6.13 at bind, from the link a driver makes between its
rx queue and its NAPI context (virtio_net and most NIC drivers make it;
veth does not, so a socket on a veth never gets one); before 6.13 from the
first frame received, where the driver registered its XDP queue with a
NAPI id (veth does, when XDP runs on it).
"""

import errno
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.tuning.sockopts import SO_BUSY_POLL, SO_PREFER_BUSY_POLL

SO_BUSY_POLL_BUDGET = getattr(socket, "SO_BUSY_POLL_BUDGET", 70)
SO_INCOMING_NAPI_ID = getattr(socket, "SO_INCOMING_NAPI_ID", 56)
DEFAULT_USEC = 20
_INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class BusyPoll:
    """Busy polling to ask for: poll for up to USEC µs before sleeping,
    BUDGET frames per pass, with the NAPI context preferring the poller
    (PREFER). The kernel judges the values; only a C int fits."""

    usec: int = DEFAULT_USEC
    budget: int = 64
    prefer: bool = True

    def __post_init__(self):
        for name in ("usec", "budget"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or \
                    not -_INT_MAX - 1 <= value <= _INT_MAX:
                raise ZerolayerError(f"busy poll {name} must be a 32-bit integer, not {value!r}")


@dataclass(frozen=True)
class BusyPollState:
    """What a socket holds after BusyPoll was applied: usec and prefer read
    back with getsockopt; budget as setsockopt accepted it (None: refused,
    the kernel's default applies). REFUSED: one "OPTION (why)" per option
    the kernel refused."""

    usec: int
    budget: int | None
    prefer: bool
    refused: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"usec": self.usec, "budget": self.budget, "prefer": self.prefer}

    def text(self) -> str:
        """'busy polling 20 µs, budget 64, preferred' (or 'no busy polling')."""
        if not self.usec:
            return "no busy polling"
        budget = "the kernel's budget" if self.budget is None else f"budget {self.budget}"
        return f"busy polling {self.usec} µs, {budget}{', preferred' if self.prefer else ''}"

    def refusal(self) -> str | None:
        """One line naming what the kernel refused, and why."""
        if not self.refused:
            return None
        return f"busy polling: the kernel refused {'; '.join(self.refused)}"


def _why(name: str, exc: OSError) -> str:
    text = os.strerror(exc.errno or 0)
    if exc.errno == errno.ENOPROTOOPT:  # an option this kernel does not have
        needs = "" if name == "SO_BUSY_POLL" else "Linux 5.11 and "
        return f"{text}: it needs {needs}CONFIG_NET_RX_BUSY_POLL"
    if exc.errno == errno.EPERM:
        return f"{text}: it needs CAP_NET_ADMIN"
    return text


def _read(sock: socket.socket, option: int) -> int:
    try:
        return sock.getsockopt(socket.SOL_SOCKET, option)
    except OSError:  # a kernel without the option holds nothing for it
        return 0


def apply(sock: socket.socket, wanted: BusyPoll) -> BusyPollState:
    """Set WANTED on SOCK at SOL_SOCKET and read back what holds. A refused
    option is recorded, never raised: the socket works without it."""
    refused = []
    budget: int | None = None
    for option, name, value in ((SO_BUSY_POLL, "SO_BUSY_POLL", wanted.usec),
                                (SO_PREFER_BUSY_POLL, "SO_PREFER_BUSY_POLL", int(wanted.prefer)),
                                (SO_BUSY_POLL_BUDGET, "SO_BUSY_POLL_BUDGET", wanted.budget)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, value)
        except OSError as exc:
            refused.append(f"{name}={value} ({_why(name, exc)})")
            continue
        if option == SO_BUSY_POLL_BUDGET:
            budget = value
    return BusyPollState(_read(sock, SO_BUSY_POLL), budget,
                         bool(_read(sock, SO_PREFER_BUSY_POLL)), tuple(refused))


def napi_id(sock: socket.socket) -> int:
    """The NAPI id the socket is tied to; 0: none (no busy polling)."""
    return _read(sock, SO_INCOMING_NAPI_ID)


def spin(kicks: Sequence[Callable[[], None]], ready: Callable[[], bool], seconds: float) -> bool:
    """Kick each socket (one NAPI pass each) until READY() or SECONDS pass,
    at least once: a busy poller's wait before it sleeps, as the kernel's
    own sk_busy_loop does for a blocking read of an ordinary socket."""
    end = time.monotonic() + seconds
    while True:
        for kick in kicks:
            kick()
        if ready():
            return True
        if time.monotonic() >= end:
            return False
