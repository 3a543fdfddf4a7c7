# SPDX-License-Identifier: Apache-2.0
"""A BPF hash map by its fd, its keys and values as tuples of the C struct
they are (struct formats), for the maps the tracing programs share with
userspace (bpf/streams.bpf.c). The fd is the loader's: this never closes it."""

import struct

from pyxdp.kernel import bpfsys


class Table:
    def __init__(self, fd: int, key: str, value: str):
        self.fd = fd
        self.key = struct.Struct(key)
        self.value = struct.Struct(value)

    def keys(self) -> list[tuple]:
        """Every key, one system call when the map is empty."""
        return [self.key.unpack(k) for k in bpfsys.map_keys(self.fd, self.key.size)]

    def get(self, key: tuple) -> tuple | None:
        raw = bpfsys.map_lookup(self.fd, self.key.pack(*key), self.value.size)
        return None if raw is None else self.value.unpack(raw)

    def items(self) -> list[tuple[tuple, tuple]]:
        """Every (key, value) there is; one gone since its key was read is
        left out (an LRU map evicts at any time)."""
        found = []
        for key in self.keys():
            value = self.get(key)
            if value is not None:
                found.append((key, value))
        return found

    def set(self, key: tuple, value: tuple, flags: int = bpfsys.BPF_ANY) -> None:
        """OSError when the kernel refuses (BPF_NOEXIST and there, full)."""
        bpfsys.map_update(self.fd, self.key.pack(*key), self.value.pack(*value), flags)

    def delete(self, key: tuple) -> bool:
        """False when there was no such key."""
        return bpfsys.map_delete(self.fd, self.key.pack(*key))
