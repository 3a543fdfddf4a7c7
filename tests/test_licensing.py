# SPDX-License-Identifier: Apache-2.0
"""What the project says about its license, and what the kernel is told.
Every source file names its license in an SPDX line: Apache-2.0, except the
C compiled into the kernel (the BPF programs and the headers beside and
below them), which is GPL-2.0 OR BSD-2-Clause, as in xdp-tools and Cilium.
Each BPF program tells the kernel "Dual BSD/GPL" in its object's "license"
section; the kernel takes that as
GPL-compatible, which bpf_fib_lookup, a GPL-only
helper the parser calls, requires."""

import ctypes
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
APACHE = "Apache-2.0"
DUAL = "GPL-2.0 OR BSD-2-Clause"
SPDX = re.compile(r"SPDX-License-Identifier: (.+?)\s*(\*/)?$")
# What clang puts in the object's "license" section for the kernel; the
# kernel's list of GPL-compatible strings has this one
# (include/linux/license.h).
SECTION_LICENSE = 'char _license[] SEC("license") = "Dual BSD/GPL";'
# A BPF program includes the header of what plain clang needs; the
# project's userspace C (pyxdp/xsk/_core.c, the bench's consumers) does not.
BPF_PROGRAM = re.compile(r'^#include "zl_object\.h"', re.M)

SOURCE_SUFFIXES = {".py", ".pyi", ".c", ".h", ".sh", ".toml", ".yaml", ".yml"}
SOURCE_NAMES = {"Makefile", "Vagrantfile", ".gitignore", ".clang-format"}
# Not in a checkout, so never walked when there is no git to ask.
SKIPPED_DIRS = {"build", "dist", "__pycache__"}


def _files() -> list[Path]:
    """The files git tracks, and those it would (new, not ignored); without
    git (a copy of the tree, as tests/test_unprivileged.py makes), the tree
    less dot-directories and build output."""
    git = shutil.which("git")
    if git and (REPO / ".git").exists():
        done = subprocess.run([git, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                              cwd=REPO, capture_output=True, check=True)
        names = [n for n in done.stdout.decode().split("\0") if n]
        return sorted({REPO / n for n in names})
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
                   and (not d.startswith(".") or d == ".ci")]
        found += [Path(root, f) for f in files]
    return sorted(found)


def _is_source(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False  # pyxdp/bpf and pyxdp/tuning point at directories; deleted files
    if path.suffix in SOURCE_SUFFIXES or path.name in SOURCE_NAMES:
        return True
    if path.suffix:
        return False
    with open(path, "rb") as f:
        return f.read(2) == b"#!"  # a script: .ci/run, vagrant/vm/zl-init


def _spdx(path: Path) -> str | None:
    """The SPDX expression in the file's first three lines (a shebang may
    come first)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        head = [f.readline() for _ in range(3)]
    for line in head:
        found = SPDX.search(line.rstrip("\n"))
        if found:
            return found.group(1)
    return None


SOURCES = [p for p in _files() if _is_source(p)]
C_FILES = [p for p in SOURCES if p.suffix in (".c", ".h")]
BPF_PROGRAMS = [p for p in C_FILES if p.suffix == ".c" and BPF_PROGRAM.search(p.read_text())]
BPF_DIRS = {p.parent for p in BPF_PROGRAMS}


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_the_walk_finds_the_sources():
    """Not an empty list passing the checks below: the files of every kind."""
    found = {_rel(p) for p in SOURCES}
    for name in ("pyproject.toml", "setup.py", "pyxdp/__init__.py", "bpf/xdp_token.bpf.c",
                 "bpf/zl_parse.h", "vagrant/provision.sh", ".ci/run", "vagrant/vm/zl-init",
                 "pyxdp/xsk/_core.pyi", "Makefile", ".pre-commit-config.yaml"):
        assert name in found, name


def test_every_source_file_has_an_spdx_line():
    missing = [_rel(p) for p in SOURCES if _spdx(p) is None]
    assert not missing, f"no SPDX-License-Identifier in the first lines of: {missing}"


def test_the_kernel_side_c_is_dual_licensed_and_the_rest_apache():
    """The C beside a BPF program is compiled into it; everything else,
    userspace C included, is Apache-2.0 like the package."""
    wrong = []
    for path in SOURCES:
        kernel_side = path in BPF_PROGRAMS or (
            path.suffix == ".h" and any(d in BPF_DIRS for d in path.parents))
        want = DUAL if kernel_side else APACHE
        if _spdx(path) != want:
            wrong.append(f"{_rel(path)}: {_spdx(path)!r}, not {want!r}")
    assert not wrong, wrong


def test_every_bpf_program_tells_the_kernel_dual_bsd_gpl():
    names = {p.name for p in BPF_PROGRAMS}
    # the product's four and the bench's floors, wherever they live
    assert {"xdp_token.bpf.c", "xdp_tx.bpf.c", "sk_relay.bpf.c", "streams.bpf.c", "xdp_pass.bpf.c", "xdp_count.bpf.c",
            "tracepoint_floor.bpf.c", "uprobe_hit.bpf.c"} <= names, names
    for path in BPF_PROGRAMS:
        lines = path.read_text().splitlines()
        assert lines.count(SECTION_LICENSE) == 1, f"{_rel(path)}: no `{SECTION_LICENSE}` line"


def test_the_license_file_is_apache_2_and_the_package_says_so():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert 'license = { text = "Apache-2.0" }' in (REPO / "pyproject.toml").read_text()


# struct bpf_prog_info: __u32 gpl_compatible:1 is the first bit of the word
# at offset 84 (after ifindex), in every kernel since 4.18.
_GPL_COMPATIBLE_AT = 84
_PROG_INFO_PREFIX = 88


def _gpl_compatible(prog_fd: int) -> bool:
    from pyxdp.kernel import bpfsys

    info = ctypes.create_string_buffer(_PROG_INFO_PREFIX)
    attr = ctypes.create_string_buffer(struct.pack("=IIQ", prog_fd, len(info), ctypes.addressof(info)))
    bpfsys.bpf(bpfsys.BPF_OBJ_GET_INFO_BY_FD, attr)
    return bool(struct.unpack_from("=I", info.raw, _GPL_COMPATIBLE_AT)[0] & 1)


@pytest.mark.root
def test_the_kernel_takes_the_parser_as_gpl_compatible():
    """The parser calls bpf_fib_lookup, which the verifier refuses to a
    program that is not GPL-compatible: that it loads at all says the
    kernel took "Dual BSD/GPL"; the flag says so directly."""
    from pyxdp.xdp import compiler

    loaded = compiler.load_token()
    try:
        assert _gpl_compatible(loaded.prog_fd)
    finally:
        loaded.close()


@pytest.mark.root
def test_the_kernel_takes_the_relay_as_gpl_compatible():
    from pyxdp.relay.datapath import RelayDataPath

    relay = RelayDataPath()
    try:
        fds = relay._loaded.prog_fds
        assert fds and all(_gpl_compatible(fd) for fd in fds.values())
    finally:
        relay.close()
