# SPDX-License-Identifier: Apache-2.0
"""The pieces under `zerolayer streams`: the event struct shared with the
C, one object for every load, the OpenSSL libraries found in
processes' maps, and what the program tracks and copies (a server and a
client of our own where only exact byte shapes will do)."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from pyxdp.streams import libraries, mapped_file, probes


@pytest.mark.root
def test_one_object_serves_every_load():
    """The object is built once and configured at each load: the maps sized
    by --max-streams and the ring as asked, the same bytes from the cache
    for any size (nothing of a run is compiled in)."""
    from pyxdp.kernel import bpfsys
    from pyxdp.xdp import compiler

    images = set()
    for max_conns in (1000, 3000):
        p = probes.Probes(max_conns=max_conns)
        try:
            for name in probes.CONN_MAPS[:-1]:
                assert bpfsys.map_info(p.tables[name].fd).max_entries == max_conns
            assert bpfsys.map_info(p.ring_fd).max_entries == probes.RING_PAGES * os.sysconf("SC_PAGE_SIZE")
        finally:
            p.close()
        with compiler.logged("zerolayer-test-") as log:
            images.add(compiler.program_object(probes.SOURCE, probes.build_flags(), log))
    assert len(images) == 1


@pytest.mark.root  # /proc/PID/map_files is opened only with CAP_SYS_ADMIN
def test_each_openssl_library_is_found_once():
    """Two processes mapping the same libssl: one library with a mapping in
    each, opened through map_files as the very inode mapped."""
    code = "import ssl, sys; print('up', flush=True); sys.stdin.read()"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "up"
        found = libraries.scan([p.pid for p in procs])
        assert len(found) == 1
        (key, maps), = found.items()
        assert sorted(m.pid for m in maps) == sorted(p.pid for p in procs)
        assert maps[0].path.endswith(("libssl.so.3", "libssl.so.1.1"))
        st = os.stat(maps[0].path)
        assert (st.st_dev, st.st_ino) == key
        opened = mapped_file.open_mapped(maps[0])
        try:
            assert (opened.st.st_dev, opened.st.st_ino) == key
            assert mapped_file.owner_note(opened.st) is None  # Debian's: root's, 0644
        finally:
            opened.close()
        assert libraries.scan([2]) == {}  # kthreadd maps nothing
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.root
def test_the_event_struct_is_the_pythons():
    from support import object_btf

    types = object_btf.build(probes.SOURCE, probes.build_flags())
    event = types.map_type("zl_st_scratch", "value")
    assert event["name"] == "zl_st_event"
    assert types.fields(event) == probes.EVENT.offsets()
    assert event["size"] == probes.EVENT.size


class Recorder:
    """A tracker that keeps what the session gives it: sizes and times, and
    the bytes, which this test alone looks at."""

    def __init__(self):
        self.described: dict = {}
        self.bytes: dict = {}
        self.lost: dict = {}
        self.ends: list = []
        self.shared: dict = {}
        self.exited: list = []
        self.forks: list = []
        self.on_evicted = None

    def describe(self, conn, **kw):
        self.described[conn] = kw

    def data(self, conn, outgoing, payload, t_ns, lost=0):
        key = (conn, outgoing)
        self.bytes[key] = self.bytes.get(key, b"") + payload
        self.lost[key] = self.lost.get(key, 0) + lost

    def closed(self, conn, t_ns, shared=False):
        self.ends.append(conn)
        self.shared[conn] = shared

    def process_exited(self, pid, t_ns):
        self.exited.append(pid)

    def forked(self, parent, child):
        self.forks.append((parent, child))
        return []


@pytest.fixture(scope="module")
def watched():
    """The program loaded for every process: it ignores its loader's own
    sockets, so the tests' peer is another process."""
    from pyxdp.streams import session

    p = probes.Probes(pids=[])
    rec = Recorder()
    s = session.Session(p, rec)
    try:
        yield p, s, rec
    finally:
        s.close()
        p.close()


def drain(s, seconds=0.5):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.poll(50)


PEER = r"""
import socket, sys, time
mode, port = sys.argv[1], int(sys.argv[2])
c = socket.create_connection(("127.0.0.1", port))
if mode == "http":
    c.sendall(b"POST /v1/x HTTP/1.1\r\nHost: a\r\n\r\n")
    big = b"data: " + b"x" * 40000 + b"\n\n"
    c.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + big)       # one write, beyond 4 pieces
    c.sendmsg([b"data: a\n\n", b"data: b\n\n"])          # vectored
elif mode == "other":
    c.sendall(b"\x00\x01binary, not http" * 10)
elif mode == "h2":
    c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00" * 100)
    c.sendall(b"more http2 frames")
elif mode == "h2-midway":
    c.sendall(b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x10\x00")  # WINDOW_UPDATE, whole
    c.sendall(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00 and more")
time.sleep(0.2)
c.close()
"""


@pytest.mark.root
@pytest.mark.parametrize("mode", ["http", "other", "h2", "h2-midway"])
def test_what_is_tracked_and_copied(watched, mode):
    """HTTP is tracked and copied (a long write in 4 pieces, the rest
    counted as lost at the next bytes, a vectored write whole); bytes that
    are not HTTP are not; a connection that begins with HTTP/2's preface is
    copied whole, and so is one whose first call holds whole HTTP/2 frames
    (a server's SETTINGS before the preface, or a connection joined mid-way,
    which userspace counts and evicts)."""
    p, s, rec = watched
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    peer = subprocess.Popen([sys.executable, "-c", PEER, mode, str(port)])
    conn, _ = srv.accept()
    got = []
    reader = threading.Thread(target=lambda: got.append(b"".join(iter(
        lambda: conn.recv(65536), b""))))
    reader.start()
    assert peer.wait(10) == 0
    reader.join(10)
    conn.close()
    srv.close()
    drain(s)
    mine = {k: v for k, v in rec.bytes.items() if k[0][0] == peer.pid}
    if mode == "other":
        assert mine == {}
        return
    key = next(k for k in mine if k[1])
    conn_id = key[0]
    assert rec.described[conn_id]["comm"] == os.path.basename(sys.executable)[:15]
    assert rec.described[conn_id]["remote"] == f"127.0.0.1:{port}"
    assert rec.described[conn_id]["tls"] is False
    sent = mine[key]
    if mode == "h2":
        assert sent == b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00" * 100 + b"more http2 frames"
        return
    if mode == "h2-midway":
        # tracked like HTTP: userspace counts it and evicts it (pyxdp.streams.tracker)
        assert sent == (b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x10\x00"
                        b"\x00\x00\x00\x04\x01\x00\x00\x00\x00 and more")
        return
    total = got[0]
    piece = probes.PIECE * probes.PIECES
    # the big write: its first 4 pieces, then the rest missed; the next
    # write's bytes follow with the gap counted before them
    head = len(b"POST /v1/x HTTP/1.1\r\nHost: a\r\n\r\n")
    assert sent[:head + piece] == total[:head + piece]
    assert rec.lost[key] == len(total) - len(sent)
    assert sent.endswith(b"data: a\n\ndata: b\n\n")
    assert conn_id in rec.ends
    assert s.failures == {}


FORKER = r"""
import os, socket, sys, time
port = int(sys.argv[1])
c = socket.create_connection(("127.0.0.1", port))
c.sendall(b"POST /v1/x HTTP/1.1\r\nHost: a\r\n\r\n")
time.sleep(0.3)  # the request is announced before the fork
child = os.fork()
if child == 0:
    time.sleep(0.3)
    c.sendall(b"data: from the child\n\n")
    c.close()  # the last descriptor: the socket's end
    os._exit(0)
c.close()  # the child still holds the socket: shared
os.waitpid(child, 0)
"""


@pytest.mark.root
def test_a_fork_is_reported_and_a_shared_close_says_so(watched):
    """The kernel reports a tracked process's fork with the child's tgid
    (not a thread's); the parent's close of a socket the child still holds
    is flagged shared, the child's last close is not; both keys name the
    same socket inode."""
    p, s, rec = watched
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    peer = subprocess.Popen([sys.executable, "-c", FORKER, str(port)])
    conn, _ = srv.accept()
    got = b"".join(iter(lambda: conn.recv(65536), b""))
    assert peer.wait(10) == 0
    conn.close()
    srv.close()
    drain(s)
    forks = [f for f in rec.forks if f[0] == peer.pid]
    assert len(forks) == 1 and forks[0][1] != peer.pid
    child = forks[0][1]
    parent_key = next(k for k in rec.ends if k[0] == peer.pid)
    child_key = next(k for k in rec.ends if k[0] == child)
    assert rec.shared[parent_key] is True and rec.shared[child_key] is False
    assert rec.described[parent_key]["socket"] == rec.described[child_key]["socket"] > 0
    assert rec.described[parent_key]["uid"] == os.getuid()
    assert rec.bytes[(child_key, True)] == b"data: from the child\n\n"
    assert got.endswith(b"data: from the child\n\n")
    assert s.failures == {}


VECTORED = r"""
import os, socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
events = [b"data: %d\n\n" % i for i in range(int(sys.argv[2]))]
c.sendmsg(events[:12])  # asyncio on Python 3.12+: what a slow reader left, one sendmsg
os.writev(c.fileno(), [b"data: " + b"y" * 9000 + b"\n\n", b"data: z\n\n"])  # a long first
c.sendmsg(events)  # more pieces than a vectored call is copied in
c.sendall(b"data: end\n\n")
c.close()
"""


@pytest.mark.root
def test_a_vectored_call_is_copied_across_its_iovecs(watched):
    """A vectored write of many small buffers is copied whole (its first
    buffer in pieces if long), up to IOVS buffers a call; what is past them
    is missed and counted lost at the next bytes. Issue 30: a chunk past the
    4th buffer of a sendmsg went missing, unseen when nothing followed."""
    p, s, rec = watched
    srv = socket.create_server(("127.0.0.1", 0))
    n = probes.IOVS + 4
    peer = subprocess.Popen([sys.executable, "-c", VECTORED, str(srv.getsockname()[1]), str(n)])
    conn, _ = srv.accept()
    total = b"".join(iter(lambda: conn.recv(65536), b""))
    assert peer.wait(10) == 0
    conn.close()
    srv.close()
    drain(s)
    [key] = [k for k in rec.bytes if k[0][0] == peer.pid and k[1]]
    missed = b"".join(b"data: %d\n\n" % i for i in range(probes.IOVS, n))
    assert rec.bytes[key] == total.replace(missed + b"data: end", b"data: end")
    assert rec.lost[key] == len(missed)
    assert s.failures == {}


IGNORED = r"""
import socket, sys
port, turns = int(sys.argv[1]), int(sys.argv[2])
c = socket.create_connection(("127.0.0.1", port))
for i in range(turns):
    c.sendall(b"\x00binary %d" % i)
c.sendall(b"POST /v1/late HTTP/1.1\r\nHost: a\r\n\r\n")  # too late: ignored
fd = c.fileno()
c.close()
c = socket.create_connection(("127.0.0.1", port))  # the same fd, a new connection
assert c.fileno() == fd
c.sendall(b"POST /v1/fresh HTTP/1.1\r\nHost: a\r\n\r\n")
c.close()
"""


@pytest.mark.root
@pytest.mark.parametrize("turns", [probes.IGNORE_AFTER - 1, probes.IGNORE_AFTER])
def test_a_socket_that_is_not_http_is_ignored_until_closed(watched, turns):
    """IGNORE_AFTER calls that are not HTTP, and the socket's later HTTP is
    not followed (one fewer, and it is); its fd closed and opened again, a
    new connection's HTTP is."""
    p, s, rec = watched
    srv = socket.create_server(("127.0.0.1", 0))
    peer = subprocess.Popen([sys.executable, "-c", IGNORED, str(srv.getsockname()[1]),
                             str(turns)])
    for _ in range(2):
        conn, _ = srv.accept()
        while conn.recv(65536):
            pass
        conn.close()
    assert peer.wait(10) == 0
    srv.close()
    drain(s)
    sent = b"".join(v for k, v in rec.bytes.items() if k[0][0] == peer.pid and k[1])
    assert (b"/v1/late" in sent) == (turns < probes.IGNORE_AFTER)
    assert b"/v1/fresh" in sent


REUSED = r"""
import os, socket, sys
port, what, turns = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = socket.create_connection(("127.0.0.1", port))
s = socket.socket(fileno=os.dup2(c.fileno(), 200))  # the same fd in every process
c.close()
if what == "binary":
    for i in range(turns):
        s.sendall(b"\x00binary %d" % i)
else:
    s.sendall(b"POST /v1/%s HTTP/1.1\r\nHost: a\r\n\r\n" % what.encode())
print("sent", flush=True)
sys.stdin.readline()
os._exit(0)  # the socket still open: the kernel closes it, with no close(2)
"""


def popen_as(pid: int, args: list[str], **kwargs) -> subprocess.Popen:
    """ARGS started as process PID, a free pid: the kernel's last given pid
    set to the one before (ns_last_pid, as CRIU restores processes), tried
    again when another fork took PID first."""
    for _ in range(50):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(args, **kwargs)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.fail(f"pid {pid} was not given to a new process in 50 tries")


def holds(table, pid: int, fd: int | None = None) -> bool:
    """Whether TABLE has an entry of process PID (and fd FD)."""
    return any(k[0] == pid and fd in (None, k[2]) for k in table.keys())


@pytest.mark.root
@pytest.mark.parametrize("left", ["ignored", "tracked"])
def test_a_reused_pid_starts_clean(watched, left):
    """A process exits with its socket (fd 200) open, ignored as not HTTP or
    tracked as HTTP; a new process given its pid writes HTTP on its own fd
    200 to another server, and is tracked as a new connection: what the dead
    one left in the program's maps went at its exit."""
    p, s, rec = watched
    table = p.tables["zl_st_ignored" if left == "ignored" else "zl_st_conns"]
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    ports = [str(srv.getsockname()[1]) for srv in servers]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    procs: list[subprocess.Popen] = []
    accepted: list[socket.socket] = []

    try:
        first = subprocess.Popen([sys.executable, "-c", REUSED, ports[0],
                                  "binary" if left == "ignored" else "first",
                                  str(probes.IGNORE_AFTER)], **pipes)
        procs.append(first)
        accepted.append(servers[0].accept()[0])
        assert first.stdout.readline() == "sent\n"
        drain(s)
        assert holds(table, first.pid, 200), f"fd 200 is {left}"
        first.stdin.write("\n")
        first.stdin.close()
        assert first.wait(10) == 0
        end = time.monotonic() + 10
        while holds(table, first.pid) and time.monotonic() < end:
            s.poll(50)
        second = popen_as(first.pid, [sys.executable, "-c", REUSED, ports[1], "second", "0"],
                          **pipes)
        procs.append(second)
        accepted.append(servers[1].accept()[0])
        assert second.stdout.readline() == "sent\n"
        drain(s)
        conn = (first.pid, 0, 200)
        assert b"/v1/second" in rec.bytes.get((conn, True), b"")
        assert rec.described[conn]["remote"] == f"127.0.0.1:{ports[1]}"
        assert s.failures == {}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for sock in accepted + servers:
            sock.close()


TLS_PEER = r"""
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
print("up", flush=True)
sys.stdin.readline()  # the uprobes are in place
with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as raw:
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as c:
        c.sendall(b"POST /v1/tls HTTP/1.1\r\nHost: a\r\n\r\n")
        c.recv(100)
"""


@pytest.mark.root
def test_a_tls_event_is_built_in_a_buffer_of_its_thread(watched, tmp_path):
    """The SSL functions' uprobe programs can be preempted (Linux 7.x), so
    a TLS event is built in its thread's buffer, not the per-CPU one the
    system calls' programs share: the peer's TLS bytes arrive, and its
    thread has an entry in zl_st_tls_scratch."""
    import ssl

    from support import streams_lab

    p, s, rec = watched
    cert, key = streams_lab.certificate(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = socket.create_server(("127.0.0.1", 0))
    peer = subprocess.Popen([sys.executable, "-c", TLS_PEER, str(srv.getsockname()[1]),
                             str(cert)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert peer.stdout.readline() == "up\n"
        p.scan([peer.pid])
        peer.stdin.write("\n")
        peer.stdin.flush()
        raw, _ = srv.accept()
        with ctx.wrap_socket(raw, server_side=True) as conn:
            conn.recv(100)
            conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
        assert peer.wait(10) == 0
        drain(s)
        sent = b"".join(v for k, v in rec.bytes.items() if k[0][0] == peer.pid and k[0][1] and k[1])
        assert b"POST /v1/tls" in sent
        assert any(k[0] >> 32 == peer.pid for k in p.tables["zl_st_tls_scratch"].keys())
        assert s.failures == {}
    finally:
        peer.kill()
        peer.wait()
        srv.close()


FILLER = r"""
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
for i in range(200):  # each write an event: far more than a one-page ring holds
    c.sendall(b"data: " + b"x" * 100 + b"\n\n")
c.close()
"""


@pytest.fixture
def one_page_ring(monkeypatch):
    """The program loaded for every process with a ring of one page, and
    a session feeding a Recorder: (session, recorder). Nobody reads the
    ring until a test drains it."""
    from pyxdp.streams import session

    monkeypatch.setattr(probes, "RING_PAGES", 1)
    p = probes.Probes(pids=[])
    try:
        rec = Recorder()
        s = session.Session(p, rec)
        try:
            yield s, rec
        finally:
            s.close()
    finally:
        p.close()


def fill_ring(srv) -> int:
    """A process of FILLER's connecting to SRV, its writes read to the end
    here (the ring holds far fewer): its pid, once it has exited."""
    peer = subprocess.Popen([sys.executable, "-c", FILLER, str(srv.getsockname()[1])])
    try:
        conn, _ = srv.accept()
        with conn:
            while conn.recv(65536):
                pass
        assert peer.wait(10) == 0
    finally:
        peer.kill()
        peer.wait()
    return peer.pid


@pytest.mark.root
def test_a_close_and_an_exit_the_full_ring_refused_still_arrive(one_page_ring):
    """With a ring of one page nobody reads, the writes of a connection fill
    it; its close and its process's exit are kept in the program's map of
    missed ends, and the session gives them to the tracker in their place."""
    s, rec = one_page_ring
    with socket.create_server(("127.0.0.1", 0)) as srv:
        peer = fill_ring(srv)
    drain(s)
    mine = [k for k in rec.bytes if k[0][0] == peer]
    assert mine, "the connection was tracked"
    written = len(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n") \
        + 200 * len(b"data: " + b"x" * 100 + b"\n\n")
    assert sum(len(rec.bytes[k]) for k in mine) < written, "the ring was full"
    assert mine[0][0] in rec.ends
    assert peer in rec.exited
    assert s.ends_missed >= 1  # one of them at least (a close may just fit)
    assert s.failures == {}


LATE = r"""
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"POST /v1/late HTTP/1.1\r\nHost: a\r\n\r\n")  # the ring is full: its CONN is refused
sys.stdin.readline()  # the ring read meanwhile
c.sendall(b"POST /v1/again HTTP/1.1\r\nHost: a\r\n\r\n")
c.recv(1)
"""


@pytest.mark.root
def test_a_description_the_full_ring_refused_is_told_at_the_next_call(one_page_ring):
    """A connection first seen while the ring is full gets no CONN; the
    program tells it again (a LINK, its offsets going on) at its next call,
    before that call's bytes, so its record still says who and where; the
    refusals are counted by kind."""
    s, rec = one_page_ring
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = str(srv.getsockname()[1])
        fill_ring(srv)
        late = subprocess.Popen([sys.executable, "-c", LATE, port], stdin=subprocess.PIPE,
                                text=True)
        try:
            lconn, _ = srv.accept()
            with lconn:
                assert lconn.recv(100).startswith(b"POST /v1/late")
                assert s.refused().get("described") == 1
                drain(s)  # the ring read: room again
                assert not [k for k in rec.described if k[0] == late.pid]
                late.stdin.write("\n")
                late.stdin.flush()
                assert lconn.recv(100).startswith(b"POST /v1/again")
                lconn.sendall(b"x")
                assert late.wait(10) == 0
            drain(s)
        finally:
            late.kill()
            late.wait()
    [key] = [k for k in rec.described if k[0] == late.pid]
    told = rec.described[key]
    assert told["remote"] == f"127.0.0.1:{port}" and told["tls"] is False
    assert rec.bytes[(key, True)] == b"POST /v1/again HTTP/1.1\r\nHost: a\r\n\r\n"
    assert rec.lost[(key, True)] == len(b"POST /v1/late HTTP/1.1\r\nHost: a\r\n\r\n")
    assert s.refused()["data"] >= 1
    assert s.failures == {}
