# SPDX-License-Identifier: Apache-2.0
"""Files root acts on, planted by someone else (issue 31, docs/spec.md
§10.1): an ordinary user, made and removed by the test, owns configurations,
profiles, directories and links; others are world-writable, FIFOs, links to
/dev/zero, 2 MiB or nested 5,000 deep, or set kernel.core_pattern to a pipe.
`apply`, `apply --dry-run` and `tune --profile` refuse each in one line,
exit 2, having done nothing; `apply --watch` logs one line for each version
of its file, keeps the last good configuration and still stops on SIGTERM.
Every file is under tmp_path (root's, 0700, in sticky /tmp), in a directory
the test makes root's and 0755."""

import os
import signal
import subprocess
import time

import pytest

from pyxdp.service import lock
from support.cli_runner import ZEROLAYER
from support.hostile import ordinary_user
from support.tuning_fixtures import profile_text
from support.watch_runner import Watcher, wait_for

pytestmark = pytest.mark.root

GOOD = "# no interface: nothing to do\n"
PROFILE = profile_text("p", ("s", {"kind": "note", "name": "n", "reason": "r"}))
CORE_PATTERN = profile_text("p", ("s", {"kind": "sysctl", "name": "kernel.core_pattern",
                                        "value": "|/tmp/zl-crash %p", "scope": "global"}))


@pytest.fixture
def stranger():
    """An ordinary user's uid, for the length of the test."""
    with ordinary_user() as user:
        yield user.pw_uid


@pytest.fixture
def private(tmp_path):
    tmp_path.chmod(0o755)
    return tmp_path


def plant(kind: str, path, uid: int, good: str = GOOD) -> str:
    """A bad file of KIND at PATH (replacing what is there, in one rename);
    the words its refusal has."""
    new = path.with_name(path.name + ".new")
    if kind == "world-writable":
        new.write_text(good)
        new.chmod(0o666)
    elif kind == "foreign-owned":
        new.write_text(good)
        os.chown(new, uid, -1)
    elif kind == "foreign-directory":
        shelf = path.parent / f"shelf-{uid}"
        shelf.mkdir(exist_ok=True)
        (shelf / "z.toml").write_text(good)
        os.chown(shelf, uid, -1)
        new.symlink_to(shelf / "z.toml")
    elif kind == "foreign-link":  # the user's link, in a sticky directory as /tmp
        sticky = path.parent / "sticky"
        sticky.mkdir(exist_ok=True)
        sticky.chmod(0o1777)
        (sticky / "link").unlink(missing_ok=True)
        (sticky / "link").symlink_to(path.parent / "elsewhere.toml")
        os.lchown(sticky / "link", uid, -1)
        (path.parent / "elsewhere.toml").write_text(good)
        new.symlink_to(sticky / "link")
    elif kind == "dev-zero":
        new.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(new)
    elif kind == "huge":
        new.write_bytes(b"#" * (2 << 20))
    elif kind == "deep":
        new.write_text("x = " + "[" * 5000 + "\n")
    elif kind == "deleted":
        path.unlink()
        return "No such file or directory"
    else:
        raise AssertionError(kind)
    os.replace(new, path)
    return {"world-writable": "writable by its group and others", "foreign-owned": "owned by zlh",
            "foreign-directory": "owned by zlh", "foreign-link": "owned by zlh",
            "dev-zero": "/dev/zero is a character device", "fifo": "is a FIFO",
            "huge": "2097152 bytes", "deep": "nested too deeply"}[kind]


KINDS = ["world-writable", "foreign-owned", "foreign-directory", "foreign-link", "dev-zero",
         "fifo", "huge", "deep"]


def refused(args: list[str], words: str) -> None:
    done = subprocess.run([ZEROLAYER, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (args, done)
    assert done.stdout == "" and done.stderr.count("\n") == 1, (args, done)
    assert done.stderr.startswith("zerolayer: ") and words in done.stderr, (args, done)
    assert "internal error" not in done.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_apply_and_its_dry_run_refuse_a_file_root_should_not_trust(private, stranger, kind):
    path = private / "zerolayer.toml"
    words = plant(kind, path, stranger)
    for args in (["apply", "--dry-run"], ["apply"]):
        refused([*args, str(path)], words)


@pytest.mark.parametrize("kind", KINDS)
def test_tune_and_apply_refuse_such_a_profile(private, stranger, kind):
    path = private / "p.toml"
    words = plant(kind, path, stranger, good=PROFILE)
    refused(["tune", "--profile", str(path), "--dry-run"], words)
    (private / "zerolayer.toml").write_text('[tuning]\nprofile = "p.toml"\n')
    refused(["apply", "--dry-run", str(private / "zerolayer.toml")], words)


def test_a_profile_that_would_run_a_program_is_refused(private):
    (private / "p.toml").write_text(CORE_PATTERN)
    words = "kernel.core_pattern = '|/tmp/zl-crash %p': the kernel would hand"
    refused(["tune", "--profile", str(private / "p.toml"), "--dry-run"], words)
    (private / "zerolayer.toml").write_text('[tuning]\nprofile = "p.toml"\n')
    refused(["apply", str(private / "zerolayer.toml")], words)


def test_a_state_directory_others_can_write_is_refused(private):
    (private / "state").mkdir(mode=0o777)
    (private / "state").chmod(0o777)
    done = subprocess.run([ZEROLAYER, "tune", "--verify", "--state-dir", str(private / "state")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done
    assert f"refusing state directory {private}/state: it is writable by" in done.stderr


def test_watch_keeps_the_last_good_file_through_each_bad_one(private, stranger):
    path = private / "zerolayer.toml"
    path.write_text(GOOD)
    watcher = Watcher(str(path))
    try:
        watcher.wait_line("watching")
        for n, kind in enumerate([*KINDS, "deleted"], 1):
            words = plant(kind, path, stranger)
            watcher.wait_line("keeping the last good configuration", n)
            line = watcher.lines[-1]
            assert words in line and line.endswith("; keeping the last good configuration")
            time.sleep(1)  # a few looks at the same bad file: still one line for it
            assert watcher.count("keeping the last good configuration") == n, watcher.lines
            assert watcher.proc.poll() is None
        path.write_text(GOOD)
        watcher.wait_line(f"reloaded {path}")
        plant("fifo", path, stranger)  # then SIGTERM while the file is a FIFO
        watcher.wait_line("is a FIFO")
        assert watcher.stop() == 0
        assert watcher.lines[-1] == "stopped"
    finally:
        watcher.kill()


def test_watch_stops_on_sigterm_while_its_file_is_a_fifo(private):
    path = private / "zerolayer.toml"
    path.write_text(GOOD)
    watcher = Watcher(str(path))
    try:
        watcher.wait_line("watching")
        os.unlink(path)
        os.mkfifo(path)
        watcher.proc.send_signal(signal.SIGHUP)  # read it now
        watcher.wait_line("is a FIFO")
        assert watcher.stop() == 0
    finally:
        watcher.kill()


def test_watch_stops_on_sigterm_while_it_waits_for_the_apply_lock(private):
    """Another apply holds the lock; --watch waits up to its --wait (60 s)
    for it, and SIGTERM ends that wait, not its end."""
    path = private / "zerolayer.toml"
    path.write_text(GOOD)
    with lock.held(1):
        watcher = Watcher(str(path))
        try:
            watcher.wait_line("watching")
            time.sleep(0.5)  # into the first pass, on the lock
            watcher.proc.send_signal(signal.SIGTERM)
            assert watcher.proc.wait(timeout=20) == 0, watcher.proc.stderr.read()
        finally:
            watcher.kill()


def test_watch_runs_a_pass_when_a_namespace_it_names_is_deleted(lab, private):
    path = private / "zerolayer.toml"
    path.write_text(f'[[interface]]\nname = "{lab.dut.ifname}"\nnetns = "{lab.dut.netns}"\n')
    watcher = Watcher(str(path))
    try:
        watcher.wait_line(f"attach {lab.dut.ifname}")
        subprocess.run(["ip", "netns", "del", lab.dut.netns], check=True)
        watcher.wait_line(f"network namespace {lab.dut.netns} does not exist")
        wait_for("its namespace to be gone", lambda: not os.path.exists(
            f"/run/netns/{lab.dut.netns}"))
        assert watcher.stop() == 0
    finally:
        watcher.kill()


def test_a_glob_that_matches_nothing_says_so_as_itself(private):
    path = private / "zerolayer.toml"
    path.write_text(f'[[interface]]\nmatch = {{ name = "zl{os.getpid()}x*" }}\n')
    done = subprocess.run([ZEROLAYER, "apply", "--dry-run", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done
    assert done.stdout.splitlines()[1:] == [
        "nothing to do", f"interface[1].match (name 'zl{os.getpid()}x*') matches no interface"]
