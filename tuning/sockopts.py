# SPDX-License-Identifier: Apache-2.0
"""Per-socket low-latency options: the half of "nodelay" that no sysctl can set.

There is no `net.ipv4.tcp_nodelay`: Nagle's algorithm is turned off one socket
at a time, with TCP_NODELAY. The tuning profiles set what is system-wide
(`net.ipv4.tcp_autocorking=0`, `net.core.busy_read`/`busy_poll`); this sets
the rest on one socket:

- TCP_NODELAY (TCP): send small writes now instead of waiting for an ACK.
- TCP_QUICKACK (TCP): ACK at once instead of delaying. The kernel drops out of
  quickack mode by itself, so a receiver that depends on it sets it again
  after each read (`rearm_quickack`).
- SO_BUSY_POLL (any socket, AF_XDP included): on a blocking read, poll the
  device queue for up to N microseconds before sleeping. Raising it above the
  socket's current value (which starts at net.core.busy_read) needs
  CAP_NET_ADMIN.
- SO_PREFER_BUSY_POLL (opt-in, needs CAP_NET_ADMIN): let busy polling take the
  queue from interrupts. Only then do the per-NIC napi_defer_hard_irqs and
  gro_flush_timeout pay, which is why inf2 leaves them as a note (its
  napi-deferral step) and a server that sets this gives that step its knobs.
"""

import errno
import socket

from pyxdp.errors import ZerolayerError

# Python's socket module lacks these two; the values are the asm-generic ones
# used by x86 and arm (a few old architectures number them differently).
SO_BUSY_POLL = getattr(socket, "SO_BUSY_POLL", 46)
SO_PREFER_BUSY_POLL = getattr(socket, "SO_PREFER_BUSY_POLL", 69)


def _is_tcp(sock: socket.socket) -> bool:
    return sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM


def _set(sock, level, option, value, name) -> None:
    try:
        sock.setsockopt(level, option, value)
    except OSError as exc:
        if exc.errno == errno.EPERM:
            raise ZerolayerError(
                f"{name}={value} needs CAP_NET_ADMIN (raising SO_BUSY_POLL above "
                "net.core.busy_read, or SO_PREFER_BUSY_POLL): run as root, or set "
                "net.core.busy_read instead"
            ) from None
        raise


def set_low_latency(sock: socket.socket, *, busy_poll_us: int = 50,
                    prefer_busy_poll: bool = False) -> dict[str, int]:
    """Set the low-latency options on SOCK; return what the kernel holds now.

    TCP options are set only on TCP sockets. The returned dict maps each
    option name to the value read back with getsockopt.
    """
    if busy_poll_us < 0:
        raise ValueError("busy_poll_us must be >= 0")
    options = []
    if _is_tcp(sock):
        options += [
            (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1, "TCP_NODELAY"),
            (socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1, "TCP_QUICKACK"),
        ]
    options.append((socket.SOL_SOCKET, SO_BUSY_POLL, busy_poll_us, "SO_BUSY_POLL"))
    if prefer_busy_poll:
        options.append((socket.SOL_SOCKET, SO_PREFER_BUSY_POLL, 1, "SO_PREFER_BUSY_POLL"))
    for level, option, value, name in options:
        _set(sock, level, option, value, name)
    return {name: sock.getsockopt(level, option) for level, option, _, name in options}


def rearm_quickack(sock: socket.socket) -> None:
    """Set TCP_QUICKACK again; the kernel clears it as the connection goes on."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
