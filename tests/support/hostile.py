# SPDX-License-Identifier: Apache-2.0
"""An ordinary user who plants things where root's commands go, and a
private bpffs and /run/zerolayer for each such test: a mount namespace of
its own, so whatever was planted vanishes with it and nothing else on the
machine sees it."""

import contextlib
import os
import pwd
import secrets
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def ordinary_user() -> Iterator[pwd.struct_passwd]:
    """A user made for the block (no home, no shell) and removed after it."""
    name = f"zlh{os.getpid()}{secrets.token_hex(2)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        # -r: nothing of it stays (it has no home, so userdel warns and says so)
        subprocess.run(["userdel", "-r", name], capture_output=True)
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            raise AssertionError(f"user {name} is still there")


def as_user(user: pwd.struct_passwd, script: str) -> str:
    """SCRIPT as a shell command run by USER, for private_root_dirs' script."""
    return (f"setpriv --reuid={user.pw_uid} --regid={user.pw_gid} --clear-groups "
            f"sh -c {shlex.quote(script)}")


def private_root_dirs(script: str, *, run_mode: str = "0755") -> subprocess.CompletedProcess:
    """Run SCRIPT (sh, as root) in a mount namespace of its own, with a fresh
    bpffs on /sys/fs/bpf (mode 1777, as the kernel makes it by default) and
    a fresh tmpfs of mode RUN_MODE on /run/zerolayer (0755, as systemd's
    RuntimeDirectory makes it)."""
    os.makedirs("/run/zerolayer", 0o755, exist_ok=True)  # the mount point
    mounts = f"mount -t bpf bpf /sys/fs/bpf && mount -t tmpfs -o mode={run_mode} tmpfs /run/zerolayer"
    return subprocess.run(["unshare", "--mount", "--propagation", "private",
                           "sh", "-c", f"{mounts} && {script}"],
                          capture_output=True, text=True, timeout=600)


def each_recorded(commands: dict[str, str], out: Path) -> str:
    """A script running each of COMMANDS (label: shell command) whatever the
    others did, its exit code, stdout and stderr kept in OUT/LABEL.*."""
    return " ; ".join(f"{{ {cmd} >{out}/{label}.out 2>{out}/{label}.err; "
                      f"echo $? >{out}/{label}.rc; }}" for label, cmd in commands.items())


def recorded(out: Path, label: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the command LABEL that each_recorded ran."""
    return (int((out / f"{label}.rc").read_text()), (out / f"{label}.out").read_text(),
            (out / f"{label}.err").read_text())
