# SPDX-License-Identifier: Apache-2.0
"""`zerolayer apply --watch` run as a service runs it, for the tests that
watch it converge, refuse a file, and stop."""

import os
import signal
import subprocess
import threading
import time

from support.cli_runner import ZEROLAYER

WAIT_S = 60.0  # bounded waits on conditions; none is expected to take long


def wait_for(what: str, condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S:.0f}s: {what}"
        time.sleep(0.1)


class Watcher:
    """`zerolayer apply FILE --watch`, its stdout read line by line."""

    def __init__(self, path: str):
        env = {**os.environ, "JOURNAL_STREAM": "8:1"}  # as under systemd: no timestamps
        self.proc = subprocess.Popen([ZEROLAYER, "apply", path, "--watch", "--wait", "60"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    def wait_line(self, text: str, n: int = 1) -> None:
        wait_for(f"{n} line(s) with {text!r} in {self.lines}",
                 lambda: self.count(text) >= n or self.proc.poll() is not None)
        assert self.count(text) >= n, (self.lines, self.proc.stderr.read() if self.proc.stderr else "")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=WAIT_S)
        self.reader.join(timeout=WAIT_S)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
