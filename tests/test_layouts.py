# SPDX-License-Identifier: Apache-2.0
"""The C and the Python agree on what they share (docs/spec.md §7).

Structs: every struct Python shares with the programs (map keys and values,
and a test run's context) is a pyxdp.cstruct.Layout on the Python side; here
each is compared with the struct as bcc compiles it from the C (the ctypes
type bcc builds for a map's key or value): field names in order, offsets,
sizes and the total. The structs are taken from the product's own programs,
compiled and loaded as the product does; the token program's, which clang
builds into an object (bcc gives no types for it), from maps of the same
names and types declared for the purpose with its header (both compilers
are clang targeting BPF: one layout), while the sizes of its maps are read
from the program loaded; the kernel's struct xdp_md, which no program keeps
in a map, from a map declared for the purpose.

Constants: the C defines none of the shared ones; the loader passes them
all (pyxdp.xdp.compiler.shared_defines). Checked three ways: the sources
define none of those names and refuse to compile without each (an #error
guard); the map sizes and array lengths bcc reports are the Python values;
and every value, read back after all the headers, is the one Python gave.
"""

import ctypes
import importlib
import re
from pathlib import Path

import pytest

import pyxdp
from pyxdp.kernel import bpfsys
from pyxdp.lab import generator
from pyxdp.proto import counters
from pyxdp.relay import datapath, schema
from pyxdp.relay.datapath import RelayDataPath
from pyxdp.streams import probes as stream_probes
from pyxdp.xdp import compiler, egress, maps, pins

pytestmark = [pytest.mark.root, pytest.mark.kernel]

MAX_SOCKS = 64  # the relay's, for this test
# Headers of the token program alone, which clang builds (zl_object.h)
CLANG_ONLY = {"zl_object.h", "zl_maps.h", "zl_forward.h", "zl_buffers.h"}

# Set by the loader per load, not shared constants.
PER_LOAD = {"ZL_SK_SOCKS_FD", "ZL_SK_MAX_SOCKS", "ZL_SK_WINDOW",
            "ZL_HAVE_XDP_LOAD_BYTES", "ZL_XDP_PROGRAM", "ZL_XDP_PRIORITY",
            # the streams program's sizes, pid filter and the kernel's field offsets
            "ZL_ST_PIECES", "ZL_ST_IOVS", "ZL_ST_MAX_CONNS", "ZL_ST_RING_PAGES",
            "ZL_ST_FILTER_PIDS", "ZL_ST_SELF", "ZL_ST_IGNORE_AFTER", "ZL_ST_EVICTED",
            "ZL_ST_OFF_FILE_REF", "ZL_ST_FILE_REF_ZERO_BASED",
            *(f"ZL_ST_OFF_{name}" for name in stream_probes.KERNEL_FIELDS)}


def _bpf(text: str, *extra: str):
    """Compile TEXT (a test's own C) with bcc as the programs are compiled."""
    from bcc import BPF

    return BPF(text=text.encode(), cflags=[*compiler.compile_flags(), *extra])


@pytest.fixture(scope="module")
def programs():
    """bcc's view of the programs with shared structs, compiled and loaded as
    the product does."""
    token = compiler.load_token()
    loaded = {"generator": generator.load_program()} if generator.live_frames() else {}
    relay = RelayDataPath(max_socks=MAX_SOCKS)
    # the token program's structs, in maps named and typed as bpf/zl_maps.h's
    token_structs = _bpf('#include <uapi/linux/bpf.h>\n#include "zl_structs.h"\n'
                         "BPF_PERCPU_ARRAY(zl_counters, struct zl_counters, 1);\n"
                         "BPF_ARRAY(zl_config, struct zl_config, 1);\n"
                         "BPF_TABLE(\"lru_hash\", struct zl_flow_key, struct zl_flow, zl_flows, 1);\n"
                         "BPF_PERCPU_ARRAY(zl_gaps, struct zl_gap_hist, 1);\n")
    # struct xdp_md is a program's context, in no map: declare one for bcc.
    kernel = _bpf("#include <uapi/linux/bpf.h>\n"
                  "BPF_ARRAY(zl_test_xdp_md, struct xdp_md, 1);\n")
    # the streams event goes through a ring buffer, which bcc gives no type:
    # a map of it, compiled with the program's header, has it
    streams = _bpf('#include <uapi/linux/bpf.h>\n#include "streams.h"\n'
                   "BPF_ARRAY(zl_test_st_event, struct zl_st_event, 1);\n",
                   *compiler.define_flags(stream_probes.c_defines()))
    # Before 5.18 the kernel refuses the generator's program: bcc still
    # compiles it and makes its maps, which is all a layout needs.
    unloaded = [] if "generator" in loaded else [
        _bpf(f'#include "{generator.GENERATOR_PROGRAM[0]}"\n',
             *compiler.define_flags(generator.c_defines()))]
    try:
        yield {**{name: lo.bpf for name, lo in loaded.items()},
               **({"generator": unloaded[0]} if unloaded else {}),
               "relay": relay._loaded.bpf, "kernel": kernel, "streams": streams,
               "token": token_structs, "token_loaded": token}
    finally:
        for b in (kernel, streams, token_structs, *unloaded):
            b.cleanup()
        relay.close()
        token.close()
        for lo in loaded.values():
            lo.close()


def _element(ctype):
    """A per-CPU map's value type is an array over CPUs: its element."""
    return ctype._type_ if issubclass(ctype, ctypes.Array) else ctype


def _bcc_fields(ctype) -> list[tuple[str, int, int]]:
    return [(name, getattr(ctype, name).offset, getattr(ctype, name).size)
            for name, *_ in ctype._fields_]


# (program, map, "Key" or "Leaf") -> the Python Layout of that struct.
STRUCTS = {
    ("token", "zl_counters", "Leaf"): counters.LAYOUT,
    ("token", "zl_config", "Leaf"): maps.CONFIG,
    ("token", "zl_flows", "Key"): maps.FLOW_KEY,
    ("token", "zl_flows", "Leaf"): maps.FLOW,
    ("token", "zl_gaps", "Leaf"): maps.GAP_HIST,
    ("relay", "zl_sk_counters", "Leaf"): schema.LAYOUT,
    ("relay", "zl_sk_config", "Leaf"): datapath.CONFIG,
    ("relay", "zl_sk_conns", "Leaf"): datapath.CONN,
    ("generator", "zl_gen_templates", "Leaf"): generator.TEMPLATE,
    ("generator", "zl_gen_state", "Leaf"): generator.STATE,
    ("kernel", "zl_test_xdp_md", "Leaf"): generator.XDP_MD,
    ("streams", "zl_test_st_event", "Leaf"): stream_probes.EVENT,
}


@pytest.mark.parametrize("where", STRUCTS, ids=lambda w: f"struct {STRUCTS[w].c_name}")
def test_struct_layout(programs, where):
    program, table, side = where
    layout = STRUCTS[where]
    ctype = _element(getattr(programs[program][table.encode()], side))
    assert ctype.__name__ == layout.c_name
    assert _bcc_fields(ctype) == layout.offsets(), (
        f"struct {layout.c_name}: C (bcc) and Python field lists differ; a name starting "
        "__pad is padding the C struct leaves implicit")
    assert ctypes.sizeof(ctype) == layout.size


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
    assert ctypes.sizeof(relay[b"zl_sk_counters"].Key) == datapath.KEY.size
    assert ctypes.sizeof(relay[b"zl_sk_conns"].Key) == datapath.COOKIE.size
    assert ctypes.sizeof(gen[b"zl_gen_schedule"].Key) == generator.INDEX.size
    assert ctypes.sizeof(gen[b"zl_gen_schedule"].Leaf) == generator.INDEX.size


def test_map_sizes_are_the_python_values(programs):
    gen = programs["generator"]
    assert _token_map_info(programs, "ports").max_entries == 2 * maps.PORT_SLOTS  # two halves
    assert _token_map_info(programs, "xsks").max_entries == maps.XSKS_MAX
    assert _token_map_info(programs, "flows").max_entries == maps.FLOWS_MAX
    assert _token_map_info(programs, "egress").max_entries == maps.EGRESS_MAX
    assert gen[b"zl_gen_templates"].max_entries == generator.MAX_TEMPLATES
    assert gen[b"zl_gen_schedule"].max_entries == generator.MAX_SLOTS
    assert programs["relay"][b"zl_sk_conns"].max_entries == MAX_SOCKS


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
    # all but those of the object clang builds, which bcc cannot compile
    headers = sorted(p.name for p in compiler.source_dir().glob("zl_*.h")
                     if p.name not in CLANG_ONLY)
    text = "#include <uapi/linux/bpf.h>\n"
    text += "".join(f'#include "{h}"\n' for h in headers)
    # Every value is read as max_entries - 1, so 0 can be read too.
    text += "".join(f"BPF_ARRAY(zl_test_{i}, __u8, ({name}) + 1);\n"
                    for i, name in enumerate(shared))
    # with the per-load names too, for the headers that need them
    b = _bpf(text, *compiler.define_flags(schema.c_defines() | generator.c_defines()
                                          | stream_probes.c_defines()),
             "-DZL_SK_SOCKS_FD=-1", "-DZL_SK_MAX_SOCKS=2", "-DZL_SK_WINDOW=0",
             "-DZL_HAVE_XDP_LOAD_BYTES=1")
    try:
        seen = {name: b[f"zl_test_{i}".encode()].max_entries - 1
                for i, name in enumerate(shared)}
    finally:
        b.cleanup()
    assert seen == shared
