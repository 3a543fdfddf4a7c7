# SPDX-License-Identifier: Apache-2.0
"""The C splice relay the bench measures zerolayer's relays against
(pyxdp/bench/relay/splice_relay.c): bytes go through it intact both ways, an EOF
is passed on while the other direction goes on, and stopping it leaves no
process behind. It needs a C compiler, not root."""

import os
import shutil
import socket
import threading

import pytest

from pyxdp.bench.relay import peers as relay_peers
from pyxdp.relay import sockets as relay_sockets

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")


@pytest.fixture
def splice_pair():
    """(client end, upstream end) of one connection through a fresh build of
    the splice relay, and the relay itself."""
    upstream = relay_sockets.listener("127.0.0.1:0")
    upstream.settimeout(5)
    started, skipped = relay_peers.start_all(
        relay_sockets.format_address(upstream.getsockname()), ["splice"])
    assert skipped == {}
    peer = started["splice"]
    try:
        client = relay_sockets.connect(peer.address)
        server, _ = upstream.accept()
        yield client, server, peer
        client.close()
        server.close()
    finally:
        peer.stop()
        upstream.close()


def recv_all(sock: socket.socket, out: list) -> None:
    sock.settimeout(10)
    chunks = []
    while data := sock.recv(1 << 16):
        chunks.append(data)
    out.append(b"".join(chunks))


def test_bytes_arrive_intact_both_ways(splice_pair):
    client, server, _ = splice_pair
    up, down = os.urandom(3 << 20), os.urandom(2 << 20)
    got_up: list[bytes] = []
    got_down: list[bytes] = []
    readers = [threading.Thread(target=recv_all, args=(server, got_up)),
               threading.Thread(target=recv_all, args=(client, got_down))]
    for t in readers:
        t.start()
    writers = [threading.Thread(target=client.sendall, args=(up,)),
               threading.Thread(target=server.sendall, args=(down,))]
    for t in writers:
        t.start()
    for t in writers:
        t.join(10)
    client.shutdown(socket.SHUT_WR)
    server.shutdown(socket.SHUT_WR)
    for t in readers:
        t.join(10)
    assert got_up == [up] and got_down == [down]


def test_an_eof_is_passed_on_and_the_other_way_goes_on(splice_pair):
    client, server, _ = splice_pair
    client.sendall(b"request")
    client.shutdown(socket.SHUT_WR)
    got: list[bytes] = []
    recv_all(server, got)
    assert got == [b"request"]  # then EOF
    server.sendall(b"answer after the client's EOF")
    server.close()
    recv_all(client, got)
    assert got[1] == b"answer after the client's EOF"


def test_stopping_it_leaves_nothing_behind(splice_pair):
    _, _, peer = splice_pair
    peer.stop()
    assert peer.proc.poll() is not None
    assert not os.path.exists(peer.workdir)
