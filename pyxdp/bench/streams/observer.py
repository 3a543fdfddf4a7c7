# SPDX-License-Identifier: Apache-2.0
"""The observer of the streams section: `zerolayer streams --json` as a
user runs it, a process of its own, so that its CPU time (cpu_s: its
threads' run time) is the observer's alone. Its JSON lines are kept as
they come; its BPF programs' run counts are read from its fds' fdinfo."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

from pyxdp.errors import ZerolayerError

READY = "watching"  # the stderr line it prints once every probe is in place
START_S = 90.0
PROGRAM_PREFIX = "zl_st_"  # the names of the observer's BPF programs (bpf/streams.bpf.c)


def cpu_s(pid: int) -> float:
    """CPU seconds process PID has run so far, user and system, to the ns:
    the sum over its threads of /proc/PID/task/TID/schedstat (utime and stime
    of /proc/PID/stat count in 10 ms ticks, too coarse for a few seconds)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, IndexError, ValueError):  # a thread that just ended
            continue
    return total / 1e9


def others(exclude: int | None = None) -> list[int]:
    """Processes but EXCLUDE that hold the observer's BPF programs: another
    `zerolayer streams` on the host, whose probes would make an unobserved
    run observed (its uprobes are on every process's libssl)."""
    from pyxdp.kernel import bpfsys, procfs
    from pyxdp.streams.libraries import pids

    ours: dict[int, bool] = {}  # program id: is it the observer's
    found = []
    for pid in pids():
        if pid == exclude:
            continue
        for fd, link in procfs.fd_links(pid):
            if link != "anon_inode:bpf-prog":
                continue
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    prog_id = next(int(ln.split(":")[1]) for ln in f if ln.startswith("prog_id:"))
                if prog_id not in ours:
                    prog_fd = bpfsys.prog_fd_by_id(prog_id)
                    try:
                        ours[prog_id] = bpfsys.prog_info(prog_fd).name.startswith(PROGRAM_PREFIX)
                    finally:
                        os.close(prog_fd)
            except (OSError, StopIteration, ValueError):  # gone meanwhile
                continue
            if ours[prog_id]:
                found.append(pid)
                break
    return found


def _command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "zerolayer")
    if os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-c", "import sys; from pyxdp.cli import main; sys.exit(main())"]


class Observer:
    """`zerolayer streams --json [ARGS]`, started and ready (its probes placed)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([*_command(), "streams", "--json", *args],
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.pid = self.proc.pid
        self.streams: list[dict] = []
        self.stderr: list[str] = []
        self._ready = threading.Event()
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()
        if not self._ready.wait(START_S) or self.proc.poll() is not None:
            self.stop()
            why = self.stderr[-1].strip() if self.stderr else "no output"
            raise ZerolayerError(f"zerolayer streams did not start: {why}")

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.streams.append(json.loads(line))
            except ValueError:
                self.stderr.append(f"not JSON on stdout: {line[:80]}")

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            if READY in line:
                self._ready.set()
        self._ready.set()

    def wait_streams(self, since: int, pick, n: int, timeout: float) -> list[dict]:
        """The streams reported from index SINCE on that PICK accepts, once
        there are N of them (or what there is after TIMEOUT seconds)."""
        end = time.monotonic() + timeout
        while True:
            found = [s for s in self.streams[since:] if pick(s)]
            if len(found) >= n or time.monotonic() > end or self.proc.poll() is not None:
                return found
            time.sleep(0.05)

    def programs(self) -> dict[int, dict]:
        """Its BPF programs by id: type, run_cnt and run_time_ns (counted only
        while run-time statistics are on), from /proc/PID/fdinfo."""
        out: dict[int, dict] = {}
        base = f"/proc/{self.pid}/fdinfo"
        for fd in os.listdir(base):
            try:
                with open(f"{base}/{fd}") as f:
                    info = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
            except OSError:
                continue
            # A link's fdinfo names its program too; only a program's has its type.
            if "prog_id" in info and "prog_type" in info:
                out[int(info["prog_id"])] = {"type": int(info["prog_type"]),
                                             "run_cnt": int(info.get("run_cnt", 0)),
                                             "run_time_ns": int(info.get("run_time_ns", 0))}
        return out

    def stop(self) -> int | None:
        """SIGINT, as Ctrl-C (it removes its probes and prints the streams
        still open); SIGKILL if it does not end. Its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for t in self._threads:
            t.join(5)
        return self.proc.returncode
