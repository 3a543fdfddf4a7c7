# SPDX-License-Identifier: Apache-2.0
"""Field offsets of the running kernel's structs, from its BTF
(/sys/kernel/btf/vmlinux).

The probes read a few kernel structs (a task's open files, a socket's
addresses). Their layout depends on the kernel's configuration, and the
headers bcc compiles against may be another build's (this project's hosts
link a Debian header tree under a kernel built elsewhere), so the offsets
come from the kernel itself and reach the C as -D values.
"""

import struct
from functools import lru_cache

from pyxdp.errors import ZerolayerError

VMLINUX = "/sys/kernel/btf/vmlinux"

_INT, _PTR, _ARRAY, _STRUCT, _UNION, _ENUM = 1, 2, 3, 4, 5, 6
_TYPEDEF, _VOLATILE, _CONST, _RESTRICT = 8, 9, 10, 11
_FUNC_PROTO, _VAR, _DATASEC, _DECL_TAG, _TYPE_TAG, _ENUM64 = 13, 14, 15, 17, 18, 19
# bytes after the 12-byte common header, by kind: fixed, and per vlen entry
_EXTRA = {_INT: (4, 0), _ARRAY: (12, 0), _STRUCT: (0, 12), _UNION: (0, 12), _ENUM: (0, 8),
          _FUNC_PROTO: (0, 8), _VAR: (4, 0), _DATASEC: (0, 12), _DECL_TAG: (4, 0),
          _ENUM64: (0, 12)}
_QUALIFIERS = {_TYPEDEF, _VOLATILE, _CONST, _RESTRICT, _TYPE_TAG}


class Btf:
    """The types of one BTF blob: enough to find struct members' offsets."""

    def __init__(self, blob: bytes):
        magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = \
            struct.unpack_from("<HBBIIIII", blob)
        if magic != 0xEB9F:
            raise ZerolayerError(f"{VMLINUX} is not BTF")
        types = blob[hdr_len + type_off:hdr_len + type_off + type_len]
        self._strings = blob[hdr_len + str_off:hdr_len + str_off + str_len]
        # id -> (kind, name, size_or_type, members [(name, type, bit offset)])
        self.types: list[tuple[int, str, int, list[tuple[str, int, int]]]] = [(0, "", 0, [])]
        self.structs: dict[str, int] = {}
        pos = 0
        while pos < len(types):
            name_off, info, size_type = struct.unpack_from("<III", types, pos)
            pos += 12
            kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
            members = []
            if kind in (_STRUCT, _UNION):
                for i in range(vlen):
                    m_name, m_type, m_off = struct.unpack_from("<III", types, pos + 12 * i)
                    members.append((self._str(m_name), m_type, m_off & 0xFFFFFF if kflag else m_off))
            fixed, each = _EXTRA.get(kind, (0, 0))
            pos += fixed + each * vlen
            name = self._str(name_off)
            self.types.append((kind, name, size_type, members))
            if kind == _STRUCT and name and members:
                self.structs.setdefault(name, len(self.types) - 1)

    def _str(self, off: int) -> str:
        end = self._strings.index(b"\0", off)
        return self._strings[off:end].decode()

    def _resolve(self, type_id: int) -> int:
        while self.types[type_id][0] in _QUALIFIERS:
            type_id = self.types[type_id][2]
        return type_id

    def _find(self, type_id: int, field: str) -> tuple[int, int] | None:
        """(byte offset, type id) of FIELD in the struct or union TYPE_ID,
        looking into its anonymous members."""
        for name, m_type, bits in self.types[type_id][3]:
            if name == field:
                return bits // 8, m_type
            if not name:
                inner = self._resolve(m_type)
                if self.types[inner][0] in (_STRUCT, _UNION):
                    found = self._find(inner, field)
                    if found:
                        return bits // 8 + found[0], found[1]
        return None

    def offset(self, struct_name: str, path: str) -> int:
        """Byte offset of PATH ("a.b.c", through nested structs) in STRUCT_NAME."""
        if struct_name not in self.structs:
            raise ZerolayerError(f"the kernel's BTF has no struct {struct_name}")
        type_id, total = self.structs[struct_name], 0
        for field in path.split("."):
            found = self._find(self._resolve(type_id), field)
            if found is None:
                raise ZerolayerError(f"the kernel's struct {struct_name} has no {path}")
            total += found[0]
            type_id = found[1]
        return total


@lru_cache(maxsize=1)
def vmlinux() -> Btf:
    try:
        with open(VMLINUX, "rb") as f:
            return Btf(f.read())
    except OSError as exc:
        raise ZerolayerError(f"cannot read the kernel's BTF ({VMLINUX}: {exc.strerror}): "
                             "zerolayer streams needs a kernel built with "
                             "CONFIG_DEBUG_INFO_BTF") from None
