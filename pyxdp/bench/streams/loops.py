# SPDX-License-Identifier: Apache-2.0
"""What a process that streams nothing pays while `zerolayer streams`
watches, and what one uprobe hit costs on this machine.

A loop process, spawned once, runs on command one of two loops on a TCP
connection to itself over 127.0.0.1, 64 bytes that are no HTTP a turn:
- "write": send() on one end, recv() on the other (the system calls the
  observer's tracepoints see);
- "ssl": the same through Python's ssl (OpenSSL 3: SSL_write_ex, then
  SSL_read_ex, the functions the observer's uprobes are on).
It answers with its CPU time per turn (the thread's: a uprobe's trap and
program run on the probed thread's time), not the wall time, which the
other processes on a 2-vCPU machine would stretch.

BareProbes puts a program that only counts (uprobe_hit.bpf.c) on entry and
return of SSL_write_ex and SSL_read_ex in the loop process alone: the "ssl"
loop with it, less the loop without it, over the calls it counted, is what
one probed call (its entry and return hits) costs here.

BareTracepoints puts a program that returns at once (tracepoint_floor.bpf.c)
on every tracepoint the observer uses, for every process: what any
observer built on them costs before it does anything (the floor).
"""

import os
import socket
import ssl
import threading
import time
from pathlib import Path

from pyxdp.errors import ZerolayerError
from pyxdp.xdp import compiler

PAYLOAD = b"x" * 64
PROBED = ("SSL_write_ex", "SSL_read_ex")


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        a = socket.create_connection(listener.getsockname())
        b, _ = listener.accept()
    return a, b


def _tls_pair(cert: str, key: str) -> tuple[ssl.SSLSocket, ssl.SSLSocket]:
    a, b = _tcp_pair()
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE  # the run's own self-signed certificate
    wrapped: dict[str, ssl.SSLSocket] = {}

    def accept() -> None:
        wrapped["server"] = server_ctx.wrap_socket(b, server_side=True)

    t = threading.Thread(target=accept)
    t.start()
    client = client_ctx.wrap_socket(a)
    t.join()
    return client, wrapped["server"]


def _turns(sender, receiver, turns: int) -> float:
    """Thread CPU ns per send + recv turn."""
    send, recv = sender.send, receiver.recv
    start = time.thread_time_ns()
    for _ in range(turns):
        send(PAYLOAD)
        recv(4096)
    return (time.thread_time_ns() - start) / turns


def loop_main(conn, cert: str, key: str) -> None:
    """The loop process: sends ready, then answers {"kind", "turns"} with CPU
    ns per turn; None ends it."""
    pairs = {"write": _tcp_pair(), "ssl": _tls_pair(cert, key)}
    conn.send(True)
    while (job := conn.recv()) is not None:
        conn.send(_turns(*pairs[job["kind"]], job["turns"]))
    for pair in pairs.values():
        for s in pair:
            s.close()


def libssl_of(pid: int):
    """The libssl file process PID maps, opened as the observer opens it
    (pyxdp.streams.mapped_file), and its PROBED functions' file offsets."""
    from pyxdp.streams import elf_symbols, libraries, mapped_file

    found = libraries.mapped(pid)
    if not found:
        raise ZerolayerError(f"process {pid} maps no libssl: Python's ssl is not OpenSSL 3 here")
    try:
        opened = mapped_file.open_mapped(found[0])
    except (mapped_file.Refused, mapped_file.Gone) as exc:
        raise ZerolayerError(f"the libssl of process {pid} cannot be probed: {exc}") from None
    try:
        offsets = elf_symbols.function_offsets(opened.fd, opened.st.st_size, PROBED)
    except elf_symbols.ElfRefused as exc:
        opened.close()
        raise ZerolayerError(f"the libssl of process {pid} cannot be probed: {exc}") from None
    return opened, offsets


# The floors: the observer's hooks with programs that return at once.
HIT_BUILD = compiler.shipped("uprobe_hit.bpf.c", directory=Path(__file__).parent)
TRACEPOINT_FLOOR_BUILD = compiler.shipped("tracepoint_floor.bpf.c", directory=Path(__file__).parent)


class BareProbes:
    """uprobe_hit.bpf.c on entry and return of PROBED in libssl, for process PID
    alone; hits() counts every run (two a call)."""

    def __init__(self, pid: int):
        from pyxdp.kernel import uprobe

        self._loaded = compiler.load(HIT_BUILD, "zl_bench_hit", maps={"hits": "zl_hits"})
        self._perf_fds: list[int] = []
        try:
            opened, offsets = libssl_of(pid)
            try:
                for sym in PROBED:
                    for ret in (False, True):
                        self._perf_fds.append(uprobe.attach(
                            self._loaded.prog_fd, opened.path, offsets[sym], retprobe=ret,
                            pid=pid))
            finally:
                opened.close()
        except BaseException:
            self.close()
            raise

    def hits(self) -> int:
        from pyxdp.kernel.bpf_table import Table

        hits = Table(self._loaded.map_fds["hits"], "=I", "=Q").get((0,))
        return hits[0] if hits else 0  # an array's entry is always there

    def close(self) -> None:
        for fd in self._perf_fds:  # each uprobe goes with its perf event
            os.close(fd)
        self._perf_fds = []
        self._loaded.close()


class BareTracepoints:
    """tracepoint_floor.bpf.c on the observer's tracepoints (attached as it
    loads); a context manager, detaching them all on leaving."""

    def __enter__(self) -> "BareTracepoints":
        from pyxdp.streams.probes import SYSCALLS

        names = [f"zl_bare_sys_{edge}_{call}" for call in SYSCALLS for edge in ("enter", "exit")]
        names += ["zl_bare_sys_enter_close", "zl_bare_sched_process_exit"]
        self._loaded = compiler.load(TRACEPOINT_FLOOR_BUILD, names[0], also=tuple(names[1:]),
                                     attach=True)
        return self

    def __exit__(self, *exc) -> None:
        self._loaded.close()
