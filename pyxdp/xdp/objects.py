# SPDX-License-Identifier: Apache-2.0
"""Every BPF program as an object built by clang, cached by what went into
it: the one way a program is built (pyxdp.xdp.compiler.program_object).

An object is an ELF file with BTF (`clang -target bpf -g`), which libbpf
loads, libxdp's dispatcher runs, and CO-RE relocations fit to the running
kernel (the stream observer's kernel struct reads). It depends on the C
sources and the -D values (made from the Python definitions), not on the
running kernel: what a run sets is set at load. So it is built once,
ahead (`zerolayer build`, which provisioning and the images run; a source
changed since is built on first use), and kept in /var/cache/zerolayer/bpf
under the SHA-256 of both, so that clang is needed only to build (not by a
service whose PATH lacks it); the cache is
root's alone (each directory checked, the file opened without following a
link and checked to be root's), and a file is written under a temporary
name and renamed into place, so a reader never sees half of one.
"""

import errno
import glob
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import root_dirs

CACHE = root_dirs.Tree("/var/cache/zerolayer")
CACHE_DIR = "bpf"
# Objects kept: one per program and build in use (the parser's variants,
# the relay's windows, the observer, the generator, the bench's floors), a
# few upgrades back.
KEEP = 32
# Objects this process compiled (not found in the cache): what `zerolayer
# build` reports, and what the tests hold at none once it has run.
compiles = 0

_CLANG = "/usr/bin/clang"
# Debian puts the multiarch asm/ headers that linux/bpf.h includes here.
_MULTIARCH_INCLUDE = "/usr/include/x86_64-linux-gnu"


def _clang() -> str:
    """Debian's clang, by its path: root runs it, so never by a PATH
    someone else may have set."""
    versioned = sorted(glob.glob(_CLANG + "-[0-9]*"), reverse=True,
                       key=lambda p: int(p.rsplit("-", 1)[1]) if p.rsplit("-", 1)[1].isdigit() else 0)
    for path in [_CLANG, *versioned]:
        if os.access(path, os.X_OK):
            return path
    raise ZerolayerError(
        f"{_CLANG} is not installed, and zerolayer's XDP program is built with it: "
        "run `bash vagrant/provision.sh` (or `apt-get install clang`)")


# Every build's own flags, part of its key. An undeclared helper would
# become an extern that libbpf cannot open the object for: an error here,
# naming it, instead.
_CLANG_FLAGS = ("-O2", "-g", "-target", "bpf", "-Wall", "-Wno-unused-function",
                "-Werror=implicit-function-declaration")


def _key(source_dir, source: str, flags: list[str]) -> str:
    """What went in: the flags, and every C file of SOURCE_DIR and of the
    include directories the flags name (under them too), by name and
    content, not by where they are: the same sources installed elsewhere
    (another venv, a VM's) make the same key."""
    digest = hashlib.sha256()
    digest.update("\0".join([*_CLANG_FLAGS, *(f for f in flags if not f.startswith("-I"))]).encode())
    dirs = dict.fromkeys([Path(source_dir), *(Path(f[2:]) for f in flags if f.startswith("-I"))])
    for directory in dirs:
        if str(directory) == _MULTIARCH_INCLUDE:
            continue
        digest.update(b"\1")
        for path in sorted(directory.rglob("*.[ch]")):
            digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(source.encode())
    return digest.hexdigest()


def _read_cached(name: str) -> bytes | None:
    fd = root_dirs.open_file(CACHE, CACHE_DIR, name, flags=os.O_RDONLY)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _compile(clang: str, source_path: str, flags: list[str], log_path: str) -> bytes:
    """Compile into a private temporary directory; the object's bytes."""
    with tempfile.TemporaryDirectory(prefix="zerolayer-clang-") as tmp:
        out = os.path.join(tmp, "prog.o")
        cmd = [clang, *_CLANG_FLAGS, f"-I{_MULTIARCH_INCLUDE}", *flags, "-c", source_path,
               "-o", out]
        with open(log_path, "ab") as log:
            done = subprocess.run(cmd, stdout=log, stderr=log, check=False)
        if done.returncode != 0:
            with open(log_path, errors="replace") as log:
                lines = [ln.strip() for ln in log if "error:" in ln]
            first = lines[0] if lines else f"clang exited with {done.returncode}"
            raise ZerolayerError(f"compiling {os.path.basename(source_path)} failed: {first} "
                                 f"(full log: {log_path})")
        with open(out, "rb") as f:
            return f.read()


def _store(name: str, image: bytes) -> None:
    """Write IMAGE as the cache's NAME, atomically."""
    with CACHE.opened(CACHE_DIR, create=True) as dfd:
        assert dfd is not None
        staging = f".{name}.{os.getpid()}"
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(image)
            os.rename(staging, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            os.unlink(staging, dir_fd=dfd)
            raise
        _prune(dfd)


def _prune(dfd: int) -> None:
    """Remove all but the KEEP newest objects (builds of older sources)."""
    built = []
    for entry in os.scandir(dfd):
        if entry.name.endswith(".o") and entry.is_file(follow_symlinks=False):
            built.append((entry.stat(follow_symlinks=False).st_mtime, entry.name))
    for _, old in sorted(built, reverse=True)[KEEP:]:
        os.unlink(old, dir_fd=dfd)


def build(source_dir, source: str, flags: list[str], log_path: str) -> bytes:
    """The object of SOURCE in SOURCE_DIR compiled with FLAGS, from the
    cache when it is there. Compiler output goes to LOG_PATH. A cache that
    cannot be written (a read-only root file system, as a container may
    have) is done without: the object is built each time."""
    name = _key(source_dir, source, flags) + ".o"
    cached = _read_cached(name)
    if cached is not None:
        return cached
    global compiles
    image = _compile(_clang(), str(source_dir / source), flags, log_path)
    compiles += 1
    try:
        _store(name, image)
    except OSError as exc:
        if exc.errno != errno.EROFS:
            raise
    return image
