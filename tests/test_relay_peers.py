# SPDX-License-Identifier: Apache-2.0
"""The relay bench's peers (pyxdp/bench/relay/peers.py) end with the run
that started them, however it ends: socat and haproxy know nothing of
their parent, so a bench killed outright (SIGKILL, a test's timeout: no
`finally` runs) must not leave them listening on loopback. The next run
sweeps the directory the killed one left. Not root."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from pyxdp.bench.relay import peers as relay_peers

STARTER = """
import json, sys, time
from pyxdp.bench.relay import peers as relay_peers
started, skipped = relay_peers.start_all("127.0.0.1:9", [sys.argv[1]])
peer = started[sys.argv[1]]
print(json.dumps({"pid": peer.proc.pid, "workdir": peer.workdir}), flush=True)
time.sleep(60)
"""


def _ended(pid: int) -> bool:
    """PID has exited (a zombie its new parent has not reaped counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("name", ["socat", "haproxy"])
def test_a_peer_dies_with_the_process_that_started_it(name):
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed")
    proc = subprocess.Popen([sys.executable, "-c", STARTER, name], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        peer = json.loads(proc.stdout.readline())
        assert not _ended(peer["pid"])
    finally:
        proc.kill()
        proc.wait(10)
    deadline = time.monotonic() + 10
    while not _ended(peer["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _ended(peer["pid"]), f"{name} outlived the process that started it"
    assert peer["workdir"] in relay_peers.sweep_stale()
    assert not os.path.exists(peer["workdir"])
