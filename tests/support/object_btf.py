# SPDX-License-Identifier: Apache-2.0
"""The types of a BPF object as clang recorded them in its BTF, read with
bpftool (`bpftool -j btf dump file`): a struct's fields (name, byte offset,
size) and a BTF-defined map's key, value and max_entries. What the
programs really hold, for the tests that compare it with Python's view."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

from pyxdp.xdp import compiler

_QUALIFIERS = {"TYPEDEF", "CONST", "VOLATILE", "RESTRICT", "TYPE_TAG"}


class ObjectTypes:
    def __init__(self, image: bytes):
        with tempfile.NamedTemporaryFile(suffix=".o") as f:
            f.write(image)
            f.flush()
            out = subprocess.run(["bpftool", "-j", "btf", "dump", "file", f.name],
                                 capture_output=True, text=True, check=True).stdout
        self.types = {t["id"]: t for t in json.loads(out)["types"]}
        self.maps = {}
        for t in self.types.values():
            if t["kind"] == "DATASEC" and t["name"] == ".maps":
                for var in t["vars"]:
                    v = self.types[var["type_id"]]
                    self.maps[v["name"]] = self.types[v["type_id"]]

    def _resolve(self, type_id: int) -> dict:
        t = self.types[type_id]
        while t["kind"] in _QUALIFIERS:
            t = self.types[t["type_id"]]
        return t

    def size(self, type_id: int) -> int:
        t = self._resolve(type_id)
        if t["kind"] == "ARRAY":
            return t["nr_elems"] * self.size(t["type_id"])
        if t["kind"] == "PTR":
            return 8
        return t["size"]

    def struct(self, name: str) -> dict:
        found = [t for t in self.types.values() if t["kind"] == "STRUCT" and t["name"] == name]
        assert found, f"the object's BTF has no struct {name}"
        return found[0]

    def fields(self, struct: dict) -> list[tuple[str, int, int]]:
        return [(m["name"], m["bits_offset"] // 8, self.size(m["type_id"]))
                for m in struct["members"]]

    def _map_member(self, name: str, member: str) -> dict:
        m = next(m for m in self.maps[name]["members"] if m["name"] == member)
        return self._resolve(self._resolve(m["type_id"])["type_id"])  # a pointer to it

    def map_type(self, name: str, side: str) -> dict:
        """The struct (or scalar) type of map NAME's SIDE, "key" or "value"."""
        return self._map_member(name, side)

    def map_side_size(self, name: str, side: str) -> int:
        m = next(m for m in self.maps[name]["members"] if m["name"] == side)
        return self.size(self._resolve(m["type_id"])["type_id"])

    def max_entries(self, name: str) -> int:
        """As __uint(max_entries, N) records it: a pointer to an int[N]."""
        return self._map_member(name, "max_entries")["nr_elems"]


def build(source: str, flags: tuple[str, ...] = (), text: str | None = None) -> ObjectTypes:
    """The types of SOURCE's object (bpf/), as the loaders build it with
    FLAGS, or of TEXT, a test's own C compiled the same way beside them."""
    with compiler.logged("zerolayer-test-") as log:
        if text is None:
            return ObjectTypes(compiler.program_object(source, flags, log))
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, source), "w") as f:
                f.write(text)
            image = compiler.program_object(source, flags, log, directory=Path(tmp))
        return ObjectTypes(image)
