# SPDX-License-Identifier: Apache-2.0
"""C structs that Python shares with the BPF programs, field by field.

A Layout is the one Python definition of such a struct: its fields in the C
order, each a name (the C field's) and the `struct` format of the whole
field ("Q"; an array is one field, "5Q"; bytes "16s"; padding "6x"). Formats
use standard sizes and no alignment ("="), so every byte of padding the C
struct has is a named field on both sides. tests/test_layouts.py holds each
Layout to the struct as the object's BTF records it: field names, offsets, sizes and the
total (docs/spec.md §7.3).
"""

import struct


class Layout:
    """A C struct as a struct.Struct (size, pack, unpack, unpack_from)
    built from named fields."""

    def __init__(self, c_name: str, *fields: tuple[str, str]):
        self.c_name = c_name
        self.fields = fields
        self.struct = struct.Struct("=" + "".join(fmt for _, fmt in fields))
        self.size = self.struct.size
        self.pack = self.struct.pack
        self.unpack = self.struct.unpack
        self.unpack_from = self.struct.unpack_from

    def offsets(self) -> list[tuple[str, int, int]]:
        """(name, offset, size) of every field, in order."""
        out, off = [], 0
        for name, fmt in self.fields:
            size = struct.calcsize("=" + fmt)
            out.append((name, off, size))
            off += size
        return out

    def value_names(self, **labels) -> tuple[str, ...]:
        """A name for each value unpack() returns: a field's own name, or
        NAME.LABEL for each element of an array field, its LABELS given by
        keyword (NAME.0, NAME.1... if not). Padding returns no value."""
        names: list[str] = []
        for name, fmt in self.fields:
            count = len(struct.unpack("=" + fmt, bytes(struct.calcsize("=" + fmt))))
            if name in labels:
                if len(labels[name]) != count:
                    raise ValueError(f"{self.c_name}.{name}: {count} values, "
                                     f"{len(labels[name])} labels")
                names += (f"{name}.{label}" for label in labels[name])
            elif count == 1:
                names.append(name)
            else:
                names += (f"{name}.{i}" for i in range(count))
        return tuple(names)

    def __repr__(self) -> str:
        return f"Layout(struct {self.c_name}, {self.struct.format!r})"
