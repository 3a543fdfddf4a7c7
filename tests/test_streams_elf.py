# SPDX-License-Identifier: Apache-2.0
"""The observer's own reading of libraries (docs/spec.md §11.1): the
function offsets pyxdp.streams.elf_symbols finds in Debian's libssl are
the ones binutils computes, every crafted or cut file is refused in one
line and nothing else is raised, and pyxdp.streams.mapped_file refuses a
FIFO, a device, a huge file and a swapped inode without waiting on any."""

import os
import random
import re
import ssl  # noqa: F401  (maps libssl into this process, for the scan below)
import stat
import struct
import subprocess
import time

import pytest

from pyxdp.streams import elf_symbols, libraries, mapped_file
from pyxdp.streams.tls_libraries import OPENSSL

SYMBOLS = OPENSSL.symbols()


def _libssl() -> str:
    (mapping,) = libraries.mapped(os.getpid())
    return os.path.realpath(mapping.path)


def _binutils_offsets(path: str) -> dict[str, int]:
    """What nm and readelf say: each symbol's address, made a file offset
    through the LOAD segment holding it."""
    loads = []
    for line in subprocess.run(["readelf", "-lW", path], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        fields = line.split()
        if fields[:1] == ["LOAD"]:
            loads.append(tuple(int(f, 16) for f in (fields[1], fields[2], fields[4])))
    out = {}
    for line in subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        value, kind, name = line.split()
        name = name.split("@")[0]
        if name in OPENSSL.symbols() and kind in "Tti":
            addr = int(value, 16)
            out[name] = next(addr - vaddr + off for off, vaddr, size in loads
                             if vaddr <= addr < vaddr + size)
    return out


def _offsets(path: str, names=SYMBOLS) -> dict[str, int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return elf_symbols.function_offsets(fd, os.fstat(fd).st_size, names)
    finally:
        os.close(fd)


def test_debians_libssl_offsets_are_binutils_offsets():
    path = _libssl()
    found = _offsets(path, [*OPENSSL.symbols(), "zl_no_such_function"])
    assert set(found) == set(OPENSSL.symbols())
    assert found == _binutils_offsets(path)


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> bytes:
    with open(_libssl(), "rb") as f:
        return f.read()


def _refused(tmp_path, data: bytes) -> str:
    path = tmp_path / "libssl.so.3"
    path.write_bytes(data)
    with pytest.raises(elf_symbols.ElfRefused) as exc:
        _offsets(str(path))
    message = str(exc.value)
    assert message and "\n" not in message
    return message


def _patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def test_crafted_files_are_refused_in_one_line(tmp_path, real):
    shoff = struct.unpack_from("<Q", real, 0x28)[0]
    assert "not an ELF" in _refused(tmp_path, b"#!/bin/sh\n" + real[10:])
    assert "64-bit" in _refused(tmp_path, real[:4] + b"\x01" + real[5:])  # ELFCLASS32
    assert "x86-64" in _refused(tmp_path, _patched(real, 0x12, "<H", 183))  # aarch64
    assert "ELF header" in _refused(tmp_path, real[:40])
    # section headers past the end, and a table cut off by the file's end
    assert "outside the file" in _refused(tmp_path, _patched(real, 0x28, "<Q", 1 << 60))
    assert "outside the file" in _refused(tmp_path, real[:shoff + 100])
    # no sections counted in the header: section 0's sh_size says 2^40
    huge = _patched(_patched(real, 0x3C, "<H", 0), shoff + 0x20, "<Q", 1 << 40)
    assert re.search(r"has \d+ sections", _refused(tmp_path, huge))


def test_a_symbol_table_that_lies_is_refused(tmp_path, real):
    """.dynsym's link and its string table, made wrong one at a time."""
    shoff, = struct.unpack_from("<Q", real, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", real, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", real, shoff + i * shentsize)
               for i in range(shnum)]
    dynsym = next(i for i, h in enumerate(headers) if h[1] == elf_symbols.SHT_DYNSYM)
    at = shoff + dynsym * shentsize
    assert "not a string table" in _refused(tmp_path, _patched(real, at + 0x28, "<I", dynsym))
    assert "not a multiple" in _refused(tmp_path, _patched(real, at + 0x20, "<Q",
                                                           headers[dynsym][5] + 1))
    strtab = headers[headers[dynsym][6]]
    # the string table's last byte is no NUL
    unterminated = bytearray(real)
    unterminated[strtab[4] + strtab[5] - 1] = ord("x")
    assert "NUL" in _refused(tmp_path, bytes(unterminated))


def test_random_damage_never_raises_anything_else(tmp_path, real):
    """2,000 copies of libssl with bytes of its headers and tables flipped:
    each gives offsets or one ElfRefused line, quickly."""
    shoff, = struct.unpack_from("<Q", real, 0x28)
    regions = [(0, 64), (shoff, len(real) - shoff)]
    rng = random.Random(43)
    path = tmp_path / "libssl.so.3"
    outcomes = {"offsets": 0, "refused": 0}
    slowest = 0.0
    for _ in range(2000):
        data = bytearray(real)
        for _ in range(rng.randint(1, 8)):
            start, length = rng.choice(regions)
            data[start + rng.randrange(length)] = rng.randrange(256)
        path.write_bytes(data)
        began = time.monotonic()
        try:
            _offsets(str(path))
            outcomes["offsets"] += 1
        except elf_symbols.ElfRefused as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
        slowest = max(slowest, time.monotonic() - began)
    assert outcomes["refused"] > 0 and outcomes["offsets"] > 0, outcomes
    assert slowest < 2.0


def _mapping_of(path: str) -> libraries.Mapping:
    st = os.lstat(path)
    return libraries.Mapping(os.getpid(), path, path, st.st_dev, st.st_ino, OPENSSL)


def test_mapped_file_refuses_without_waiting(tmp_path):
    """A FIFO with no writer, a device, a 1 GiB sparse file, and a file
    swapped after the scan: refused or gone, at once; a library opens."""
    fifo = tmp_path / "libssl.so.3"
    os.mkfifo(fifo)
    began = time.monotonic()
    with pytest.raises(mapped_file.Refused, match="not a regular file"):
        mapped_file.open_mapped(_mapping_of(str(fifo)))
    with pytest.raises(mapped_file.Refused, match="not a regular file"):
        mapped_file.open_mapped(_mapping_of("/dev/zero"))
    huge = tmp_path / "huge"
    with open(huge, "wb") as f:
        f.truncate(1 << 30)
    with pytest.raises(mapped_file.Refused, match="more than 512 MiB"):
        mapped_file.open_mapped(_mapping_of(str(huge)))
    swapped = _mapping_of(str(huge))
    os.rename(huge, tmp_path / "huge.old")  # kept, so the new file has another inode
    (tmp_path / "huge").write_bytes(b"\x7fELF")
    with pytest.raises(mapped_file.Gone):
        mapped_file.open_mapped(swapped)
    assert time.monotonic() - began < 2.0
    opened = mapped_file.open_mapped(_mapping_of(_libssl()))
    try:
        assert stat.S_ISREG(opened.st.st_mode) and os.path.samefile(opened.path, _libssl())
    finally:
        opened.close()


def test_owner_note_names_who_may_write(tmp_path):
    mine = tmp_path / "lib"
    mine.write_bytes(b"")
    os.chmod(mine, 0o644)
    st = os.stat(mine)
    assert (mapped_file.owner_note(st) is None) == (st.st_uid == 0)
    if st.st_uid == 0:
        os.chmod(mine, 0o666)
        assert "writable by group or others (mode 0666)" in mapped_file.owner_note(os.stat(mine))
