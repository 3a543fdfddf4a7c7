# SPDX-License-Identifier: Apache-2.0
"""Socket-level helpers shared by the relays, the token server and client,
and the relay benchmark: ADDR:PORT parsing, and what the kernel knows about
a TCP socket that the sockmap relay needs (its cookie, bytes in and out).
"""

import fcntl
import socket
import struct
import termios

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import routes

# Python's socket module lacks these (asm-generic values, as x86 and arm use)
SO_COOKIE = getattr(socket, "SO_COOKIE", 57)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
COOKIE = struct.Struct("=Q")

# struct tcp_info (linux/tcp.h): offsets of the two counters read here.
_TCP_INFO_LEN = 232
_BYTES_ACKED = 120     # __u64 tcpi_bytes_acked
_BYTES_RECEIVED = 128  # __u64 tcpi_bytes_received (the FIN counts as one)


def parse_address(text: str) -> tuple[int, tuple]:
    """'127.0.0.1:9977' or '[::1]:9977' (port 0: the kernel picks one) ->
    (family, sockaddr)."""
    ep = routes.parse_endpoint(text, any_port=True)
    if ep.version == 4:
        return socket.AF_INET, (ep.address, ep.port)
    return socket.AF_INET6, (ep.address, ep.port, 0, 0)


def format_address(sockaddr: tuple) -> str:
    host, port = sockaddr[0], sockaddr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listener(address: str, *, backlog: int = 1024) -> socket.socket:
    """A listening TCP socket on ADDRESS, with a one-line error if it cannot be."""
    family, sockaddr = parse_address(address)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ZerolayerError(f"cannot listen on {address}: {exc.strerror}") from None
    return sock


def connect(address: str, *, timeout: float = 5.0) -> socket.socket:
    family, sockaddr = parse_address(address)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(sockaddr)
    except OSError as exc:
        sock.close()
        raise ZerolayerError(f"cannot connect to {address}: {exc.strerror or exc}") from None
    sock.settimeout(None)
    return sock


def cookie(sock: socket.socket) -> int:
    """The socket's cookie: what bpf_get_socket_cookie() returns for it."""
    return COOKIE.unpack(sock.getsockopt(socket.SOL_SOCKET, SO_COOKIE, COOKIE.size))[0]


def bytes_written(sock: socket.socket) -> int:
    """Bytes handed to the socket's TCP send side so far: acknowledged plus
    still queued. (The acknowledged count includes the SYN of a connection
    we opened: compare differences, not absolute values.)"""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
    acked = struct.unpack_from("=Q", info, _BYTES_ACKED)[0]
    queued = struct.unpack("=i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    return acked + queued


def bytes_received(sock: socket.socket) -> int:
    """Bytes the socket's peer sent and TCP accepted, plus one once the peer's
    FIN is in."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
    return struct.unpack_from("=Q", info, _BYTES_RECEIVED)[0]


def pending_error(sock: socket.socket) -> int:
    """The socket's pending error (and clears it): an errno, or 0."""
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)


def ensure_rcvbuf(sock: socket.socket, size: int) -> None:
    """Make the socket's receive buffer at least SIZE bytes (root may exceed
    net.core.rmem_max)."""
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) < size:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)


def reset_on_close(sock: socket.socket) -> None:
    """Make close() send a RST instead of a FIN: how a broken stream ends."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("=ii", 1, 0))
