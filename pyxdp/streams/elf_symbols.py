# SPDX-License-Identifier: Apache-2.0
"""The file offsets of a few functions in a shared library, read from its
ELF symbol tables by this module alone.

The observer runs as root and reads libraries that anyone may have built
and mapped (docs/spec.md §11.1). A resolver's symbol lookup (bcc's did) follows the file's
.gnu_debuglink and build-id to other files, which an ordinary user names:
a FIFO there kept root blocked in open(2) for ever. This parser reads one
already opened file and nothing else: never a debuglink, a build-id note
or a path. Every read is a pread checked against the file's size, the
total read is bounded, and whatever the file says (offsets past its end,
huge counts, tables without a NUL) ends in one ElfRefused line, never
another exception. Only ELF64 little-endian x86-64 is read; other classes
are refused.
"""

import os
import struct
from collections.abc import Iterable, Iterator

MAX_READ = 64 << 20  # bytes read from one file at most, whatever it claims
MAX_SECTIONS = 65535  # e_shnum is 16 bits; a larger count (through sh_size) is refused
MAX_SEGMENTS = 65535

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_PHDR = struct.Struct("<IIQQQQQQ")
_SYM = struct.Struct("<IBBHQQ")

ET_DYN, ET_EXEC = 3, 2
EM_X86_64 = 62
SHT_SYMTAB, SHT_STRTAB, SHT_DYNSYM, SHT_GNU_VERSYM = 2, 3, 11, 0x6FFFFFFF
PT_LOAD = 1
STT_FUNC, STT_GNU_IFUNC = 2, 10
STB_GLOBAL, STB_WEAK = 1, 2
SHN_UNDEF, SHN_LORESERVE = 0, 0xFF00


class ElfRefused(Exception):
    """The file is not an ELF this parser reads, or is inconsistent: the
    message is one line saying what."""


class _Reader:
    """Bounded preads of FD, FILE_SIZE bytes long."""

    def __init__(self, fd: int, file_size: int):
        self.fd = fd
        self.size = file_size
        self.read_total = 0

    def read(self, offset: int, length: int, what: str) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ElfRefused(f"its {what} would be read from outside the file ({length} bytes at {offset}, "
                             f"file of {self.size})")
        self.read_total += length
        if self.read_total > MAX_READ:
            raise ElfRefused(f"its tables need more than {MAX_READ >> 20} MiB read")
        try:
            data = os.pread(self.fd, length, offset)
        except OSError as exc:
            raise ElfRefused(f"reading its {what} failed ({exc.strerror or exc})") from None
        if len(data) != length:
            raise ElfRefused(f"its {what} is cut short (the file shrank)")
        return data


def _table(reader: _Reader, offset: int, count: int, entsize: int, layout: struct.Struct,
           what: str) -> Iterator[tuple]:
    """COUNT entries of LAYOUT, ENTSIZE bytes apart from OFFSET, read at once
    and unpacked one by one."""
    if entsize < layout.size:
        raise ElfRefused(f"its {what} entries are {entsize} bytes, not {layout.size}")
    data = reader.read(offset, count * entsize, what)
    return (layout.unpack_from(data, i * entsize) for i in range(count))


def _name(strtab: bytes, index: int) -> bytes | None:
    if index >= len(strtab):
        return None
    end = strtab.find(b"\0", index)
    return None if end < 0 else strtab[index:end]


def _hidden(reader: _Reader, sections: list[tuple], count: int) -> bytes | None:
    """Per .dynsym entry, whether .gnu.version marks it hidden: a version
    other than the default (SSL_read@OPENSSL_1.1 beside
    SSL_read@@OPENSSL_3.0.0). None without a table of COUNT entries."""
    for section in sections:
        if section[1] == SHT_GNU_VERSYM and section[5] == 2 * count:
            data = reader.read(section[4], section[5], "symbol versions")
            return bytes(v >> 15 for (v,) in struct.iter_unpack("<H", data))
    return None


def _section_symbols(reader: _Reader, sections: list[tuple], sym_type: int,
                     wanted: frozenset[bytes]) -> dict[bytes, int] | None:
    """WANTED's values in the first section of SYM_TYPE, or None if there is
    none: of a name defined more than once, the default version's."""
    for _name_i, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if sh_type != sym_type:
            continue
        if not 0 < link < len(sections) or sections[link][1] != SHT_STRTAB:
            raise ElfRefused(f"its symbol table links to section {link}, not a string table")
        if entsize == 0 or size % entsize:
            raise ElfRefused(f"its symbol table's size {size} is not a multiple of {entsize}")
        str_sec = sections[link]
        strtab = reader.read(str_sec[4], str_sec[5], "string table")
        if strtab and not strtab.endswith(b"\0"):
            raise ElfRefused("its string table does not end with a NUL")
        count = size // entsize
        hidden = _hidden(reader, sections, count) if sym_type == SHT_DYNSYM else None
        found: dict[bytes, int] = {}
        others: dict[bytes, int] = {}
        for i, (st_name, st_info, _other, shndx, value, _size) in enumerate(_table(
                reader, offset, count, entsize, _SYM, "symbol table")):
            kind, bind = st_info & 0xF, st_info >> 4
            if (kind not in (STT_FUNC, STT_GNU_IFUNC) or bind not in (STB_GLOBAL, STB_WEAK)
                    or shndx == SHN_UNDEF or shndx >= SHN_LORESERVE or value == 0):
                continue
            name = _name(strtab, st_name)
            if name is None:
                raise ElfRefused(f"a symbol's name index {st_name} is past its string table")
            if name in wanted:
                (others if hidden and hidden[i] else found).setdefault(name, value)
        return others | found
    return None


def _file_offset(segments: list[tuple], vaddr: int) -> int | None:
    for p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _align in segments:
        if p_type == PT_LOAD and p_vaddr <= vaddr < p_vaddr + p_filesz:
            return vaddr - p_vaddr + p_offset
    return None


def function_offsets(fd: int, file_size: int, names: Iterable[str]) -> dict[str, int]:
    """The file offsets of the defined functions NAMES in the ELF file open
    as FD (FILE_SIZE bytes), from its .dynsym (else its .symtab); a name it
    does not define is absent. ElfRefused when the file cannot be read so."""
    wanted = frozenset(n.encode() for n in names)
    reader = _Reader(fd, file_size)
    (ident, e_type, machine, _version, _entry, phoff, shoff, _flags, _ehsize,
     phentsize, phnum, shentsize, shnum, _shstrndx) = _EHDR.unpack(
        reader.read(0, _EHDR.size, "ELF header"))
    if ident[:4] != b"\x7fELF":
        raise ElfRefused("it is not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise ElfRefused("it is not a 64-bit little-endian ELF file (the only kind read)")
    if machine != EM_X86_64 or e_type not in (ET_DYN, ET_EXEC):
        raise ElfRefused(f"it is not an x86-64 shared object (type {e_type}, machine {machine})")
    if shnum == 0 and shoff:  # the count is in section 0's sh_size
        shnum = next(_table(reader, shoff, 1, shentsize, _SHDR, "section headers"))[5]
    if not 0 < shnum <= MAX_SECTIONS or not 0 < phnum <= MAX_SEGMENTS:
        raise ElfRefused(f"it has {shnum} sections and {phnum} program headers")
    sections = list(_table(reader, shoff, shnum, shentsize, _SHDR, "section headers"))
    segments = list(_table(reader, phoff, phnum, phentsize, _PHDR, "program headers"))
    values = _section_symbols(reader, sections, SHT_DYNSYM, wanted)
    if not values:
        values = _section_symbols(reader, sections, SHT_SYMTAB, wanted) or {}
    offsets = {}
    for name, value in values.items():
        offset = _file_offset(segments, value)
        if offset is None:
            raise ElfRefused(f"{name.decode(errors='replace')} at {value:#x} is in no loaded "
                             "segment")
        offsets[name.decode()] = offset
    return offsets
