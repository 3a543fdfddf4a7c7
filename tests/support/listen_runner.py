# SPDX-License-Identifier: Apache-2.0
"""`zerolayer listen` run as a user runs it, for the tests that need one
(a pytest plugin: its fixture kills what a failed test left running)."""

import json
import subprocess

import pytest

from support.cli_runner import ZEROLAYER


@pytest.fixture(autouse=True)
def no_stray_listeners():
    """A failed test must not leave its listener running."""
    yield
    while Listening.running:
        Listening.running.pop().kill()


class Listening:
    """A `zerolayer listen` process, started and waited for until its
    sockets are registered (it says "listening on" once they are)."""

    running: list["Listening"] = []

    def __init__(self, lab, *args, as_json=True):
        Listening.running.append(self)
        argv = [ZEROLAYER, "listen", lab.dut.ifname, "--netns", lab.dut.netns, *map(str, args)]
        if as_json:
            argv.append("--json")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        status = self.proc.stderr if as_json else self.proc.stdout
        self.header = []
        while True:
            line = status.readline()
            if not line:
                out, err = self.proc.communicate(timeout=30)
                raise AssertionError(f"listen ended before listening: {self.header} {out} {err}")
            self.header.append(line)
            if line.startswith("listening on"):
                return

    def finish(self, timeout=30):
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


def summary_of(err: str) -> dict:
    """listen --json's summary: the last line on stderr."""
    return json.loads(err.strip().splitlines()[-1])["summary"]
