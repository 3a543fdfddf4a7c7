# SPDX-License-Identifier: Apache-2.0
"""`zerolayer streams --port / --exe / --cgroup`: with the openai SDK, two
mock servers from PyPI (llm-mock-api) on two ports and the TLS gateway
(socat), only what the selection takes is reported, both sides of it,
every chunk; a stream on another port is not. A selected process's child
is watched too, and the selection is said in the first line."""

import contextlib
import os
import subprocess
import sys
import uuid

import pytest

from pyxdp.streams import selection
from support import streams_lab as lab
from support.ports import free_ports

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("selection")
    cert, key = lab.certificate(workdir)
    chosen, other, tls = free_ports(3)
    with lab.mock_server(workdir, chosen) as mock, lab.mock_server(workdir, other) as other_mock, \
            lab.tls_gateway(tls, chosen, cert, key) as gateway:
        yield {"chosen": chosen, "other": other, "tls": tls, "cafile": str(cert),
               "mock": mock, "other_mock": other_mock, "gateway": gateway}


def prompt() -> str:
    return f"zl-private-prompt-{uuid.uuid4().hex}"


def stream_to(port: int, *args: str, scheme: str = "http") -> dict:
    out = lab.run_client("openai", f"{scheme}://127.0.0.1:{port}", prompt(), *args)
    assert len(out["streams"]) == 1
    return out


def ours(observer, pids) -> list[dict]:
    with observer._lock:
        return [s for s in observer.streams if s["pid"] in pids]


def test_port_selects_both_sides_of_that_port_only(servers):
    observer = lab.Observer("--port", str(servers["chosen"]))
    try:
        assert f"watching the processes of port {servers['chosen']}" in "".join(observer.stderr)
        assert "every process's reads and writes" not in "".join(observer.stderr)
        # a client started after the observer: taken at the next scan, once its
        # socket exists, so the mock (listening) is taken at once and the
        # client's own record may be missed; the server side is always there
        taken = stream_to(servers["chosen"])
        skipped = stream_to(servers["other"])
        [server] = observer.wait_for(lambda s: s["pid"] == servers["mock"].pid, 1)
        assert server["side"] == "server" and lab.chunks_match(server, lab.CHUNKS)
        assert server["local"].endswith(f":{servers['chosen']}")
        observer.wait_for(lambda s: False, 1, timeout=3)  # anything late comes in
        assert not ours(observer, {servers["other_mock"].pid, skipped["pid"]})
        assert {s["pid"] for s in observer.streams} <= {servers["mock"].pid, taken["pid"]}
    finally:
        observer.close()


def test_two_observers_at_once_each_see_their_own_port(servers):
    """Two `zerolayer streams` running together, each selecting one of the
    two servers: each reports its server's side and not the other's."""
    mine = lab.Observer("--port", str(servers["chosen"]))
    try:
        theirs = lab.Observer("--port", str(servers["other"]))
        try:
            stream_to(servers["chosen"])
            stream_to(servers["other"])
            for observer, server, not_server in ((mine, "mock", "other_mock"),
                                                 (theirs, "other_mock", "mock")):
                [seen] = observer.wait_for(lambda s, p=servers[server].pid: s["pid"] == p, 1)
                assert seen["side"] == "server" and lab.chunks_match(seen, lab.CHUNKS)
                assert not ours(observer, {servers[not_server].pid})
        finally:
            theirs.close()
    finally:
        mine.close()


def test_exe_selects_the_gateway_and_not_its_peers(servers):
    """socat (the gateway) by its executable: its TLS server side and its
    plaintext upstream, in the children it forks per connection; neither
    the SDK nor the mock behind it."""
    observer = lab.Observer("--exe", "*/socat")
    try:
        assert "watching the processes of executable */socat" in "".join(observer.stderr)
        out = stream_to(servers["tls"], "--cafile", servers["cafile"], scheme="https")
        found = observer.wait_for(lambda s: s["comm"] == "socat", 2)
        assert sorted((s["side"], s["tls"]) for s in found) == [("client", False),
                                                                ("server", True)]
        assert all(lab.chunks_match(s, lab.CHUNKS) for s in found)
        observer.wait_for(lambda s: False, 1, timeout=3)
        assert not ours(observer, {servers["mock"].pid, out["pid"]})
        assert {s["pid"] for s in observer.streams} == {found[0]["pid"]}
        assert found[0]["pid"] != servers["gateway"].pid  # a forked child: followed
    finally:
        observer.close()


@contextlib.contextmanager
def cgroup():
    """A cgroup v2 directory of this test's, removed after (its processes gone)."""
    root = selection.cgroup_root()
    assert root is not None, "no cgroup v2 hierarchy mounted"
    path = f"{root}/zl-test-{uuid.uuid4().hex[:12]}"
    os.mkdir(path)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(path)


def test_cgroup_selects_the_processes_started_in_it(servers):
    with cgroup() as path:
        observer = lab.Observer("--cgroup", path.removeprefix(selection.cgroup_root() + "/"))
        assert "watching the processes of cgroup" in "".join(observer.stderr), observer.stderr
        try:
            def join() -> None:
                with open(f"{path}/cgroup.procs", "w") as f:
                    f.write("0")

            client = subprocess.run(
                [sys.executable, str(lab.CLIENT), "openai", f"http://127.0.0.1:{servers['chosen']}",
                 prompt()], preexec_fn=join, capture_output=True, text=True, timeout=60)
            assert client.returncode == 0, client.stderr[-2000:]
            pid = lab.json.loads(client.stdout.splitlines()[-1])["pid"]
            [seen] = observer.wait_for(lambda s: s["pid"] == pid, 1)
            assert seen["side"] == "client" and lab.chunks_match(seen, lab.CHUNKS)
            # who it is, from its cgroup (no unit, no container) and executable
            exe = os.path.basename(os.path.realpath(sys.executable))
            assert (seen["service"], seen["executable"]) == (exe, exe)
            assert seen["container_id"] is None and seen["k8s_pod_uid"] is None
            assert seen["operation"] == "chat"
            stream_to(servers["other"])  # outside the cgroup
            observer.wait_for(lambda s: False, 1, timeout=3)
            assert {s["pid"] for s in observer.streams} == {pid}
        finally:
            observer.close()


@pytest.mark.parametrize(("args", "says"), [
    (["--port", "70000"], "ports are 1 to 65535"),
    (["--port", "9-8"], "ports are 1 to 65535, the lower first"),
    (["--port", "http"], "is not a port or a range of ports"),
    (["--cgroup", "../../etc"], "without '..'"),
    (["--cgroup", "zl-no-such.slice"], "no such cgroup"),
])
def test_a_wrong_selection_is_one_line_and_exit_2(args, says):
    out = subprocess.run([lab.ZEROLAYER, "streams", *args], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr
