# SPDX-License-Identifier: Apache-2.0
"""pyxdp.tuning.sockopts: the per-socket half of nodelay, read back from the kernel."""

import socket

import pytest

from pyxdp.kernel import netns
from pyxdp.tuning import sockopts
from support.tuning_fixtures import ip, namespace

pytestmark = pytest.mark.root


@pytest.fixture
def loopback():
    """A netns with lo up, so sockets never touch the host's loopback."""
    with namespace(with_devices=False) as name:
        ip("-n", name, "link", "set", "lo", "up")
        yield name


def test_tcp_socket_gets_nodelay_quickack_and_busy_poll(loopback):
    with netns.entered(loopback):
        server = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    with server, client, conn:
        held = sockopts.set_low_latency(conn, busy_poll_us=30)
        assert held == {"TCP_NODELAY": 1, "TCP_QUICKACK": 1, "SO_BUSY_POLL": 30}
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        client.sendall(b"x")
        assert conn.recv(1) == b"x"
        sockopts.rearm_quickack(conn)
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 1


def test_udp_socket_gets_only_the_socket_level_options(loopback):
    with netns.entered(loopback):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        held = sockopts.set_low_latency(sock, prefer_busy_poll=True)
        assert held == {"SO_BUSY_POLL": 50, "SO_PREFER_BUSY_POLL": 1}


def test_negative_busy_poll_is_refused():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        with pytest.raises(ValueError):
            sockopts.set_low_latency(sock, busy_poll_us=-1)
