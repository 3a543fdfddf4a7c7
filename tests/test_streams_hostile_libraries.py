# SPDX-License-Identifier: Apache-2.0
"""Libraries an ordinary user plants for root's observer (issue 43): a
libssl.so.3 whose .gnu_debuglink names a FIFO (the finding: root blocked
in open(2) for ever), one under a directory named with a terminal escape,
an ELF whose tables lie, a 1 GiB one, and a root-owned copy anyone may
write. Each is mapped by a sleeping process of that user. Root's `streams`
starts, ends on time and on SIGTERM, never opens the FIFO, shows every
name escaped and says in one line what it did with each library; `exporter
--streams` keeps counting (docs/spec.md §11.1)."""

import errno
import os
import shutil
import signal
import ssl  # noqa: F401  (maps libssl here: the crafted file is a copy of it)
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import hostile
from support import streams_lab as lab
from support.ports import free_port

pytestmark = pytest.mark.root

PEERS = str(Path(__file__).parent / "support" / "stream_peers.py")
ESCAPE = "\x1b]0;zl-owned\x07"  # an OSC sequence: it retitles a terminal that prints it

FAKE_SSL = r"""
int SSL_read(void *s, void *buf, int n) { (void)s; (void)buf; return n > 0 ? -1 : 0; }
int SSL_write(void *s, const void *buf, int n) { (void)s; (void)buf; return n > 0 ? -1 : 0; }
int SSL_read_ex(void *s, void *b, unsigned long n, unsigned long *r) { *r = 0; return 0; }
int SSL_write_ex(void *s, const void *b, unsigned long n, unsigned long *w) { *w = 0; return 0; }
"""

# Maps the file named by argv[1] as its loader would (read, then executable
# pages), says so, and sleeps until killed.
MAPPER = r"""
import mmap, os, sys, time
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC)
print("mapped", flush=True)
time.sleep(600)
"""


# An executable that exports OpenSSL's functions itself (as Node's builds
# do), says it runs, and sleeps.
FAKE_SSL_PROGRAM = FAKE_SSL + r"""
#include <stdio.h>
#include <unistd.h>
int main(void) { puts("mapped"); fflush(stdout); sleep(600); return 0; }
"""


def _build_fake_ssl_program(where: Path) -> Path:
    """FAKE_SSL_PROGRAM, its functions in .dynsym (-rdynamic), its
    debuglink naming the FIFO evil.debug beside it."""
    src, program = where / "fake_program.c", where / "ssl-tool"
    src.write_text(FAKE_SSL_PROGRAM)
    subprocess.run(["clang", "-O2", "-rdynamic", "-o", program, src], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={where / 'evil.debug'}", program],
                   check=True)
    return program


def _build_fake_libssl(where: Path) -> Path:
    """A libssl.so.3 defining the four functions, its debuglink naming
    evil.debug beside it: made a regular file for objcopy's checksum, then
    replaced by a FIFO nobody writes."""
    src, lib, debug = where / "fake.c", where / "libssl.so.3", where / "evil.debug"
    src.write_text(FAKE_SSL)
    subprocess.run(["clang", "-shared", "-fPIC", "-O2", "-o", lib, src], check=True)
    debug.write_bytes(b"\0" * 64)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", lib], check=True)
    _build_fake_ssl_program(where)  # its debuglink's checksum taken while it is a file
    debug.unlink()
    os.mkfifo(debug, 0o644)
    return lib


def _crafted(real: bytes) -> bytes:
    """REAL with its section headers said to be 2^60 bytes in."""
    out = bytearray(real)
    out[0x28:0x30] = (1 << 60).to_bytes(8, "little")
    return bytes(out)


@pytest.fixture(scope="module")
def planted():
    """The user, their directory (0755, theirs), each planted file with a
    process of theirs mapping it, and the FIFO."""
    from pyxdp.streams import libraries

    with hostile.ordinary_user() as user:
        home = Path(tempfile.mkdtemp(prefix="zl-hostile-lib-"))
        procs = []
        bound = False
        try:
            os.chmod(home, 0o755)
            lib = _build_fake_libssl(home)
            real = Path(os.path.realpath(libraries.mapped(os.getpid())[0].path)).read_bytes()
            escaped_dir = home / ESCAPE
            escaped_dir.mkdir()
            shutil.copy(lib, escaped_dir / "libssl.so.3")
            (home / "lies").mkdir()
            (home / "lies" / "libssl.so.3").write_bytes(_crafted(real))
            (home / "huge").mkdir()
            with open(home / "huge" / "libssl.so.3", "wb") as f:
                f.truncate(1 << 30)
            for path in home.rglob("*"):
                os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
            os.chown(home, user.pw_uid, user.pw_gid)
            # root's own copy that anyone may write (a careless install)
            (home / "loose").mkdir()
            loose = home / "loose" / "libssl.so.3"
            shutil.copy(lib, loose)
            os.chmod(loose, 0o666)
            for name in ("swapped", "bound"):
                (home / name).mkdir()
                shutil.copy(lib, home / name / "libssl.so.3")
                os.chown(home / name / "libssl.so.3", user.pw_uid, user.pw_gid)
            files = {"debuglink": lib, "escape": escaped_dir / "libssl.so.3",
                     "swapped": home / "swapped" / "libssl.so.3",
                     "bound": home / "bound" / "libssl.so.3",
                     "lies": home / "lies" / "libssl.so.3",
                     "huge": home / "huge" / "libssl.so.3", "loose": loose}
            procs.append(subprocess.Popen(
                ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                 "--clear-groups", str(home / "ssl-tool")],
                stdout=subprocess.PIPE, text=True, start_new_session=True))
            assert procs[-1].stdout.readline().strip() == "mapped"
            for path in files.values():
                proc = subprocess.Popen(
                    ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                     "--clear-groups", sys.executable, "-c", MAPPER, str(path)],
                    stdout=subprocess.PIPE, text=True, start_new_session=True)
                procs.append(proc)
                assert proc.stdout.readline().strip() == "mapped"
            # Once mapped, the paths name the FIFO: a symlink to it where the
            # library was (the mapping now reads "... (deleted)"), and the
            # FIFO bind-mounted over the other library (its mapping's path
            # unchanged): only a lookup by path would reach it.
            files["swapped"].unlink()
            os.symlink(home / "evil.debug", files["swapped"])
            os.lchown(files["swapped"], user.pw_uid, user.pw_gid)
            subprocess.run(["mount", "--bind", home / "evil.debug", files["bound"]], check=True)
            bound = True
            files["executable"] = home / "ssl-tool"
            yield {"user": user, "files": files, "fifo": home / "evil.debug",
                   "pids": [p.pid for p in procs]}
        finally:
            if bound:
                subprocess.run(["umount", files["bound"]], check=True)
            for proc in procs:
                proc.kill()
                proc.wait()
            shutil.rmtree(home, ignore_errors=True)


def _nobody_holds(fifo: Path) -> bool:
    """Whether no process has FIFO open for reading: a non-blocking writer
    is refused (ENXIO) only then."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        return exc.errno == errno.ENXIO
    os.close(fd)
    return False


def _said_about_each(stderr: str, planted: dict) -> None:
    uid = planted["user"].pw_uid
    files = planted["files"]
    assert "\x1b" not in stderr and "\x07" not in stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    private = f"is owned by uid {uid}: its uprobes go only into the processes that map it"
    assert f"{files['debuglink']} {private}" in stderr
    assert f"{files['swapped']} (deleted) {private}" in stderr
    assert f"{files['bound']} {private}" in stderr
    assert f"{files['executable']} {private}" in stderr  # OpenSSL exported by a program
    shown = str(files["escape"]).replace(ESCAPE, "\\x1b]0;zl-owned\\x07")
    assert f"{shown} {private}" in stderr
    assert f"no uprobes on {files['lies']}: its section headers would be read from outside the file" in stderr
    assert f"no uprobes on {files['huge']}: it is 1073741824 bytes long, more than 512 MiB" \
        in stderr
    assert (f"{files['loose']} is writable by group or others (mode 0666): its uprobes go "
            "only into the processes that map it") in stderr
    for name in files:  # one line each, said once
        assert sum(str(files[name]).replace(ESCAPE, "\\x1b]0;zl-owned\\x07") in line
                   for line in stderr.splitlines()) == 1, name


def test_streams_starts_ends_on_time_and_opens_nothing_planted(planted):
    """`streams --duration 2` as root: it starts, each planted library has
    its line, the FIFO is never opened, and its watch ends on time."""
    observer = lab.Observer("--duration", "2")
    try:
        assert _nobody_holds(planted["fifo"])
        code = observer.proc.wait(timeout=60)
    finally:
        observer.close()
    ended = time.monotonic()
    stderr = "".join(observer.stderr)
    assert code == 0, stderr
    at = dict(zip((line.split(":", 2)[1].split()[0] for line in observer.stderr),
                  observer.stderr_at))
    # its watch ends within a second of the duration; the kernel's removal of
    # its probes after that (each uprobe and tracepoint detach waits out an
    # RCU grace period: 5 s here for 48 uprobes and 19 tracepoints, Linux
    # 6.18 under KVM) is bounded apart
    assert at["streams"] - at["watching"] < 2 + 1, observer.stderr
    assert ended - at["streams"] < 15
    _said_about_each(stderr, planted)
    assert _nobody_holds(planted["fifo"])


def test_sigterm_ends_the_observer_at_once(planted):
    """SIGTERM: the watch ends within a second (its last line said), and the
    process once its probes are removed."""
    observer = lab.Observer()
    try:
        lines = len(observer.stderr)
        observer.proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = observer.proc.wait(timeout=60)
        ended = time.monotonic()
    finally:
        observer.close()
    assert code == 0, observer.stderr
    said = [at for line, at in zip(observer.stderr[lines:], observer.stderr_at[lines:])
            if "streams ended:" in line]
    assert said and said[0] - sent < 1, observer.stderr
    assert ended - sent < 15


def _models(url: str) -> set[str]:
    with urllib.request.urlopen(url, timeout=20) as answer:
        text = answer.read().decode()
    return {s.labels["model"] for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "zerolayer_stream_time_per_output_chunk_seconds_count"}


def test_the_exporter_keeps_counting(planted):
    """`exporter --streams` with every planted library mapped: it logs a
    line for each, escaped, and a stream after them is counted."""
    with lab.exporter() as (proc, url):
        done = subprocess.run([sys.executable, PEERS, "models", str(free_port()), "1",
                               "zl-after-planted"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        end = time.monotonic() + 15
        while "zl-after-planted-0" not in (models := _models(url)) and time.monotonic() < end:
            time.sleep(0.2)
        assert "zl-after-planted-0" in models, sorted(models)
        assert _nobody_holds(planted["fifo"])
    stderr = proc.stderr.read()
    _said_about_each(stderr, planted)
