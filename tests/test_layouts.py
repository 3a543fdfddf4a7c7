# SPDX-License-Identifier: Apache-2.0
"""The C and the Python agree on what they share (docs/spec.md §7).

Structs: every struct Python shares with the programs (map keys and values,
and a test run's context) is a pyxdp.cstruct.Layout on the Python side; here
each is compared with the struct as clang recorded it in the object's BTF
(tests/support/object_btf.py): field names in order, offsets, sizes and the
total. The structs are taken from the product's own objects, built as the
product builds them; the kernel's struct xdp_md, which no program keeps in
a map, from a map declared for the purpose; the sizes of the maps a load
sets, from the programs loaded.

Constants: the C defines none of the shared ones; the loader passes them
all (pyxdp.xdp.compiler.shared_defines). Checked three ways: the sources
define none of those names and refuse to compile without each (an #error
guard); the map sizes and array lengths the objects record are the Python
values;
and every value, read back after all the headers, is the one Python gave.
"""

import importlib
import re
import struct
from pathlib import Path

import pytest

import pyxdp
from pyxdp.kernel import bpfsys
from pyxdp.lab import generator
from pyxdp.proto import counters
from pyxdp.relay import datapath, schema
from pyxdp.relay.datapath import RelayDataPath
from pyxdp.streams import probes as stream_probes
from pyxdp.xdp import compiler, egress, maps, parsers, pins
from support import object_btf

pytestmark = [pytest.mark.root, pytest.mark.kernel]

MAX_SOCKS = 64  # the relay's, for this test

# Set by the loader per build or load, not shared constants.
PER_LOAD = {"ZL_SK_WINDOW", "ZL_HAVE_XDP_LOAD_BYTES", "ZL_XDP_PROGRAM", "ZL_XDP_PRIORITY",
            # the streams program's: how much one call copies, when a socket is ignored
            "ZL_ST_PIECES", "ZL_ST_IOVS", "ZL_ST_IGNORE_AFTER", "ZL_ST_EVICTED"}

# struct xdp_md is a program's context, in no map: a test object has one.
XDP_MD_TEXT = """#include "zl_object.h"
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdp_md);
} zl_test_xdp_md SEC(".maps");
"""


@pytest.fixture(scope="module")
def programs():
    """The programs' types as their objects' BTF records them, built as the
    product builds them; and the token program and the relay loaded, for
    the sizes their maps really have."""
    with compiler.logged("zerolayer-test-") as log:
        token_image = compiler.token_object(parsers.for_this_kernel(), log)
    types = {
        "token": object_btf.ObjectTypes(token_image),
        "relay": object_btf.build(datapath.RELAY_SOURCE, (
            *compiler.define_flags(compiler.shared_defines() | schema.c_defines()),
            "-DZL_SK_WINDOW=0")),
        "generator": object_btf.build(generator.GENERATOR_PROGRAM[0], compiler.define_flags(
            compiler.shared_defines() | generator.c_defines())),
        "streams": object_btf.build(stream_probes.SOURCE, stream_probes.build_flags()),
        "kernel": object_btf.build("zl_test_xdp_md.c", text=XDP_MD_TEXT),
    }
    token = compiler.load_token()
    relay = RelayDataPath(max_socks=MAX_SOCKS)
    try:
        yield {**types, "token_loaded": token, "relay_loaded": relay}
    finally:
        relay.close()
        token.close()


# (program, map, "key" or "value") -> the Python Layout of that struct.
STRUCTS = {
    ("token", "zl_counters", "value"): counters.LAYOUT,
    ("token", "zl_config", "value"): maps.CONFIG,
    ("token", "zl_flows", "key"): maps.FLOW_KEY,
    ("token", "zl_flows", "value"): maps.FLOW,
    ("token", "zl_gaps", "value"): maps.GAP_HIST,
    ("relay", "zl_sk_counters", "value"): schema.LAYOUT,
    ("relay", "zl_sk_config", "value"): datapath.CONFIG,
    ("relay", "zl_sk_conns", "value"): datapath.CONN,
    ("generator", "zl_gen_templates", "value"): generator.TEMPLATE,
    ("generator", "zl_gen_state", "value"): generator.STATE,
    ("kernel", "zl_test_xdp_md", "value"): generator.XDP_MD,
    ("streams", "zl_st_scratch", "value"): stream_probes.EVENT,
}


@pytest.mark.parametrize("where", STRUCTS, ids=lambda w: f"struct {STRUCTS[w].c_name}")
def test_struct_layout(programs, where):
    program, table, side = where
    layout, types = STRUCTS[where], programs[program]
    struct = types.map_type(table, side)
    assert struct["name"] == layout.c_name
    assert types.fields(struct) == layout.offsets(), (
        f"struct {layout.c_name}: C (the object's BTF) and Python field lists differ; a name "
        "starting __pad is padding the C struct leaves implicit")
    assert struct["size"] == layout.size


def test_every_layout_is_compared():
    """A Layout added to the library is added to STRUCTS too."""
    root = Path(pyxdp.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        for name in re.findall(r"^(\w+) = Layout\(", path.read_text(), re.M):
            module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
            found.add(id(getattr(importlib.import_module(module), name)))
    assert found == {id(layout) for layout in STRUCTS.values()}


def _token_map_info(programs, pin: str) -> bpfsys.MapInfo:
    return bpfsys.map_info(programs["token_loaded"].map_fds[pin])


def test_token_map_specs(programs):
    """The pin names, and the key and value sizes and entries pyxdp.xdp.maps
    checks pinned maps against, are those of the program's maps, which it
    uses, all of them."""
    assert set(compiler.TOKEN_MAPS) == set(pins.MAPS) == set(maps.SPECS)
    used = bpfsys.prog_info(programs["token_loaded"].prog_fd).map_ids
    for pin in compiler.TOKEN_MAPS:
        info, spec = _token_map_info(programs, pin), maps.SPECS[pin]
        assert (info.key_size, info.value_size) == (spec.key_size, spec.value_size), pin
        if spec.max_entries is not None:
            assert info.max_entries == spec.max_entries, pin
        assert info.id in used, pin
    assert _token_map_info(programs, egress.PIN).type == egress.BPF_MAP_TYPE_DEVMAP_HASH


def test_scalar_keys_and_values(programs):
    relay, gen = programs["relay"], programs["generator"]
    assert _token_map_info(programs, "counters").key_size == maps.KEY.size
    assert relay.map_side_size("zl_sk_counters", "key") == datapath.KEY.size
    assert relay.map_side_size("zl_sk_conns", "key") == datapath.COOKIE.size
    assert gen.map_side_size("zl_gen_schedule", "key") == generator.INDEX.size
    assert gen.map_side_size("zl_gen_schedule", "value") == generator.INDEX.size
    for name, (key, value) in stream_probes.TABLES.items():
        assert programs["streams"].map_side_size(name, "key") == struct.calcsize(key), name
        assert programs["streams"].map_side_size(name, "value") == struct.calcsize(value), name


def test_map_sizes_are_the_python_values(programs):
    gen = programs["generator"]
    assert _token_map_info(programs, "ports").max_entries == 2 * maps.PORT_SLOTS  # two halves
    assert _token_map_info(programs, "xsks").max_entries == maps.XSKS_MAX
    assert _token_map_info(programs, "flows").max_entries == maps.FLOWS_MAX
    assert _token_map_info(programs, "egress").max_entries == maps.EGRESS_MAX
    assert gen.max_entries("zl_gen_templates") == generator.MAX_TEMPLATES
    assert gen.max_entries("zl_gen_schedule") == generator.MAX_SLOTS
    conns = programs["relay_loaded"]._maps["conns"]
    assert bpfsys.map_info(conns).max_entries == MAX_SOCKS


# --- constants ---------------------------------------------------------------------

def all_defines() -> dict[str, int]:
    """Every value the loaders pass: the token program's (the compiler's
    own), the relay's and the generator's (from their modules)."""
    return (compiler.shared_defines() | schema.c_defines() | generator.c_defines()
            | stream_probes.c_defines())


def _sources() -> dict[str, str]:
    """Every C source and header, continuation lines joined."""
    src = compiler.source_dir()
    return {p.name: p.read_text().replace("\\\n", " ")
            for p in sorted([*src.glob("*.c"), *src.glob("*.h")])}


def test_the_c_defines_no_shared_constant():
    shared = all_defines()
    for name, text in _sources().items():
        defined = set(re.findall(r"^\s*#\s*(?:define|undef)\s+(\w+)", text, re.M))
        enumerators = set(re.findall(r"\b(ZL_\w+)\s*=[^=]", text))
        clash = sorted((defined | enumerators) & set(shared))
        assert not clash, f"{name} defines {clash}, which the loader passes"


def test_every_shared_constant_is_required():
    """Each name the loader passes has an #error guard in the C, and the C
    requires no name it does not pass: nothing falls back to a default."""
    guarded = set()
    for text in _sources().values():
        for cond in re.findall(r"^\s*#\s*if(.*)\n\s*#\s*error", text, re.M):
            guarded |= set(re.findall(r"!\s*defined\s*\(\s*(\w+)\s*\)", cond))
        guarded |= set(re.findall(r"^\s*#\s*ifndef\s+(\w+)\s*\n\s*#\s*error", text, re.M))
    # the include guards have no #error
    assert guarded - PER_LOAD == set(all_defines())


def test_the_c_sees_the_python_values():
    """Every shared value as the C sees it after all the headers, read back
    through the length of a map declared with it."""
    shared = all_defines()
    headers = sorted(p.name for p in compiler.source_dir().glob("*.h"))
    text = '#include "zl_object.h"\n' + "".join(f'#include "{h}"\n' for h in headers)
    # Every value is read as max_entries - 1, so 0 can be read too.
    text += "".join(f"struct {{ __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, ({name}) + 1);"
                    f" __type(key, __u32); __type(value, __u8); }} zl_test_{i} SEC(\".maps\");\n"
                    for i, name in enumerate(shared))
    # with the per-build names too, for the headers that need them
    types = object_btf.build("zl_test_values.c", (
        *compiler.define_flags(shared | {"ZL_ST_PIECES": 1, "ZL_ST_IOVS": 1,
                                         "ZL_ST_IGNORE_AFTER": 1, "ZL_ST_EVICTED": 1}),
        "-DZL_SK_WINDOW=0", "-DZL_HAVE_XDP_LOAD_BYTES=1"), text=text)
    seen = {name: types.max_entries(f"zl_test_{i}") - 1 for i, name in enumerate(shared)}
    assert seen == shared
