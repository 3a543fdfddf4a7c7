# SPDX-License-Identifier: Apache-2.0
"""Build and load the C programs, and turn their failures into one line
each: every program is built by clang into a BPF object with BTF, once
(pyxdp.xdp.objects keeps it by what went in), and loaded by libbpf
(pyxdp.xdp.libbpf); the tracing ones carry CO-RE relocations, which libbpf
fits to the running kernel's BTF as it loads them.

Every compile gets the constants the C shares with Python as -D
definitions, made from the Python ones by shared_defines(): the C defines
none of them itself, so the two cannot drift (docs/spec.md §7.2).

clang and libbpf write diagnostics and verifier logs straight to file
descriptor 2. We point fd 2 at a log file while they run, keep that file when
something fails, and name it in the one-line error.
"""

import contextlib
import os
import platform
import re
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyxdp.bpf import SOURCE_DIR
from pyxdp.errors import ZerolayerError
from pyxdp.proto import counters, ethernet, frames, judge
from pyxdp.xdp import dispatcher, egress, libbpf, objects, parsers
from pyxdp.xdp import maps as token_maps

TOKEN_SOURCE = "xdp_token.bpf.c"
# The object's read-only data: zl_generation alone (xdp_token.bpf.c).
GENERATION = struct.Struct("=I")
# Headers plain clang needs beside the sources (bpf/clang).
CLANG_INCLUDE = "clang"

# Map variables in bpf/zl_maps.h, by their pin names; libbpf pins and
# reuses them all but the egress devmap, which pyxdp.xdp.egress makes.
TOKEN_MAPS = {"counters": "zl_counters", "config": "zl_config", "ports": "zl_ports", "xsks": "zl_xsks",
              "xsks_sg": "zl_xsks_sg", "flows": "zl_flows", "gaps": "zl_gaps",
              "egress": "zl_egress"}


def source_dir() -> Path:
    """The C sources: the installed ones, or ZEROLAYER_BPF_DIR to try a
    modified copy without reinstalling."""
    override = os.environ.get("ZEROLAYER_BPF_DIR")
    if not override:
        return SOURCE_DIR
    path = Path(override)
    if not (path / TOKEN_SOURCE).is_file():
        raise ZerolayerError(f"ZEROLAYER_BPF_DIR={override} has no {TOKEN_SOURCE}")
    return path


def shared_defines() -> dict[str, int]:
    """The C's shared constants, by C name, from their Python definitions."""
    d = {"ZL_FRAME_HDR_LEN": frames.HEADER_LEN}
    # frame types, numbered 1..ZL_FRAME_TYPES
    d.update({f"ZL_FRAME_{t.name}": t.value for t in frames.FRAME_TYPES})
    d["ZL_FRAME_TYPES"] = len(frames.FRAME_TYPES)
    d["ZL_MAX_FRAMES"] = frames.MAX_FRAMES
    # malformed reasons, numbered from 1 (counted at malformed[reason - 1])
    d["ZL_VALID"] = 0
    d.update({f"ZL_{r.upper()}": n for n, r in enumerate(counters.REASONS, 1)})
    d["ZL_REASONS"] = len(counters.REASONS)
    d["ZL_BEYOND_WINDOW"] = len(counters.REASONS) + 1
    d["ZL_DIRECT_MAX"] = judge.DIRECT_MAX
    # why a token datagram was not forwarded, numbered from 1 (forward[reason - 1])
    d.update({f"ZL_FWD_{r.upper()}": n for n, r in enumerate(counters.FORWARD_REASONS, 1)})
    d["ZL_FWD_REASONS"] = len(counters.FORWARD_REASONS)
    # zl_config
    d.update({f"ZL_MALFORMED_{p.upper()}": n for n, p in enumerate(token_maps.POLICIES)})
    d["ZL_CONFIG_FLOWS"] = token_maps.CONFIG_FLOWS
    d["ZL_CONFIG_FORWARD"] = token_maps.CONFIG_FORWARD
    d["ZL_CONFIG_PORTS_HALF"] = token_maps.CONFIG_PORTS_HALF
    d["ZL_CONFIG_GENERATION_SHIFT"] = token_maps.CONFIG_GENERATION_SHIFT
    d["ZL_GAP_BUCKETS"] = token_maps.GAP_BUCKETS
    # map sizes
    d["ZL_PORT_SLOTS"] = token_maps.PORT_SLOTS
    d["ZL_XSKS_MAX"] = token_maps.XSKS_MAX
    d["ZL_FLOWS_MAX"] = token_maps.FLOWS_MAX
    d["ZL_EGRESS_MAX"] = token_maps.EGRESS_MAX
    # what the parser reads (docs/spec.md §1.3)
    d["ZL_ETH_HLEN"] = ethernet.ETH_HLEN
    d["ZL_ETH_P_IP"] = ethernet.ETH_P_IP
    d["ZL_ETH_P_IPV6"] = ethernet.ETH_P_IPV6
    d["ZL_ETH_P_8021Q"] = ethernet.ETH_P_8021Q
    d["ZL_ETH_P_8021AD"] = ethernet.ETH_P_8021AD
    d["ZL_MAX_VLAN_TAGS"] = ethernet.MAX_VLAN_TAGS
    d["ZL_IPPROTO_UDP"] = judge.IPPROTO_UDP
    d["ZL_IPPROTO_FRAGMENT"] = judge.IPPROTO_FRAGMENT
    d["ZL_IP_MF"] = judge.IP_MF
    d["ZL_IP_OFFSET"] = judge.IP_OFFSET
    return d


def define_flags(defines: dict[str, int]) -> tuple[str, ...]:
    """-D flags for DEFINES (C name: value)."""
    return tuple(f"-D{name}={value}" for name, value in defines.items())


@contextlib.contextmanager
def _stderr_to(log_path: str):
    """Send fd 2 (where clang and the verifier log write) to LOG_PATH."""
    saved = os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@dataclass
class Loaded:
    """Programs libbpf loaded from an object, and the maps kept: our fds
    (and the links of the attached ones) until close(), which a long-lived
    process calls once they are attached or pinned."""

    prog_fd: int
    prog_name: str
    map_fds: dict[str, int] = field(default_factory=dict)
    # every loaded function's fd, FUNCTION's and ALSO's
    prog_fds: dict[str, int] = field(default_factory=dict)
    links: list = field(default_factory=list)  # libbpf.Link

    def close(self) -> None:
        for link in self.links:
            link.destroy()
        for fd in (*self.prog_fds.values(), *self.map_fds.values()):
            os.close(fd)
        self.links, self.prog_fds, self.map_fds = [], {}, {}


def token_flags(variant: str) -> tuple[str, ...]:
    """The -D definitions that build the token program as VARIANT (§1.7):
    whether it may call bpf_xdp_load_bytes, and its function's name."""
    return (f"-DZL_HAVE_XDP_LOAD_BYTES={int(variant == parsers.FULL)}",
            f"-DZL_XDP_PROGRAM={parsers.PROGRAM_NAMES[variant]}",
            f"-DZL_XDP_PRIORITY={dispatcher.DEFAULT_PRIORITY}")


@dataclass
class TokenLoaded:
    """The token program and its maps, loaded from its object; the fds are
    ours until close()."""

    prog_fd: int
    prog_name: str
    map_fds: dict[str, int]

    def close(self) -> None:
        for fd in (self.prog_fd, *self.map_fds.values()):
            os.close(fd)
        self.map_fds = {}


def program_object(source: str, flags: tuple[str, ...], log_path: str,
                   directory: Path | None = None) -> bytes:
    """The BPF object of SOURCE in DIRECTORY (bpf/, source_dir(), unless
    told: a bench floor lives next to its user), built by clang with FLAGS
    (-D definitions) and the machine's name (ZL_ARCH_<machine>, for a
    uprobe's registers), bpf/ on the include path; cached by what went in
    (pyxdp.xdp.objects). Compiler output goes to LOG_PATH."""
    src = source_dir()
    where = directory or src
    cflags = [f"-I{where}", f"-I{src}", f"-I{src / CLANG_INCLUDE}",
              f"-DZL_ARCH_{platform.machine()}", *flags]
    return objects.build(where, source, list(dict.fromkeys(cflags)), log_path)


@dataclass(frozen=True)
class Build:
    """One object: SOURCE (a *.bpf.c) in DIRECTORY (bpf/ unless told),
    built with the shared definitions and CFLAGS; VARIANT names it among
    the builds of one source."""

    source: str
    cflags: tuple[str, ...] = ()
    directory: Path | None = None
    variant: str = ""

    def image(self, log_path: str) -> bytes:
        return program_object(self.source, (*define_flags(shared_defines()), *self.cflags),
                              log_path, self.directory)


# Every object a zerolayer command loads, each named by the module that
# loads it (shipped()): `zerolayer build` builds them all ahead, at
# provisioning and into an image, so that no command compiles.
SHIPPED: list[Build] = []


def shipped(source: str, cflags: tuple[str, ...] = (), directory: Path | None = None,
            variant: str = "") -> Build:
    """The Build of SOURCE with CFLAGS, as one that a command loads."""
    build = Build(source, tuple(cflags), directory, variant)
    if build not in SHIPPED:
        SHIPPED.append(build)
    return build


@dataclass(frozen=True)
class Built:
    build: Build
    compiled: bool  # False: it was in the cache
    seconds: float


def build_shipped() -> list[Built]:
    """Every shipped object, into the cache: those already there are left."""
    done = []
    for build in SHIPPED:
        with logged(f"zerolayer-{Path(build.source).stem}-") as log_path:
            started, before = time.monotonic(), objects.compiles
            build.image(log_path)
            done.append(Built(build, objects.compiles > before, time.monotonic() - started))
    return done


# The token program, as each parser variant (§1.7).
TOKEN_BUILDS = {variant: shipped(TOKEN_SOURCE, token_flags(variant), variant=f"{variant} parser")
                for variant in parsers.PROGRAM_NAMES}


def token_object(variant: str, log_path: str) -> bytes:
    """The token program's BPF object, built as VARIANT (cached)."""
    return TOKEN_BUILDS[variant].image(log_path)


@contextlib.contextmanager
def logged(prefix: str):
    """A log file for one load, with fd 2 pointed at it: kept, and named in
    the error, when the block fails; removed when it succeeds."""
    fd, log_path = tempfile.mkstemp(prefix=prefix, suffix=".log")
    os.close(fd)
    try:
        with _stderr_to(log_path):
            yield log_path
    except BaseException:
        if os.path.getsize(log_path) == 0:  # nothing said: nothing to keep
            os.unlink(log_path)
        raise
    os.unlink(log_path)


@contextlib.contextmanager
def opened_token(pin_dir: str | None, log_path: str, generation: int = 0):
    """The token program's object, opened, not loaded: its maps to be pinned
    in PIN_DIR (reused when there), or private without it; the program of
    GENERATION (docs/spec.md §6.4). Yields it and its program's name;
    closed after the block."""
    variant = parsers.for_this_kernel()
    obj = libbpf.BpfObject(token_object(variant, log_path), TOKEN_SOURCE)
    egress_fd = None
    try:
        obj.set_rodata(GENERATION.pack(generation))
        egress_fd = egress.open_map(pin_dir)
        obj.reuse_map(TOKEN_MAPS[egress.PIN], egress_fd)
        if pin_dir:  # checked to be root's (pins.ensure_pin_dir)
            for pin, var in TOKEN_MAPS.items():
                if pin != egress.PIN:
                    obj.pin_map(var, os.path.join(pin_dir, pin))
        yield obj, parsers.PROGRAM_NAMES[variant]
    finally:
        obj.close()
        if egress_fd is not None:
            os.close(egress_fd)


def verifier_rejected(log_path: str) -> bool:
    """Whether libbpf's output in LOG_PATH holds a verifier's refusal."""
    with open(log_path, errors="replace") as log:
        return "BEGIN PROG LOAD LOG" in log.read()


def load_error(name: str, exc: OSError, log_path: str) -> ZerolayerError:
    """One line for a load libbpf failed: the verifier's refusal (its log is
    in LOG_PATH), or what else went wrong."""
    if verifier_rejected(log_path):
        return ZerolayerError(f"the kernel verifier rejected {name} ({exc.strerror}); "
                              f"verifier log: {log_path}")
    return ZerolayerError(f"loading {name} failed: {exc.strerror} (log: {log_path})")


def load_token(pin_dir: str | None = None, generation: int = 0) -> TokenLoaded:
    """zerolayer's XDP program, built as the parser variant this kernel
    takes (pyxdp.xdp.parsers), loaded alone, with all its maps: pinned in
    PIN_DIR (reused when there), or private without it; the program of
    GENERATION (docs/spec.md §6.4)."""
    with logged("zerolayer-xdp-") as log_path, \
            opened_token(pin_dir, log_path, generation) as (obj, name):
        try:
            obj.load()
        except OSError as exc:
            raise load_error(name, exc, log_path) from None
        prog_fd = obj.program_fd(name)
        return TokenLoaded(prog_fd, name, {pin: obj.map_fd(var) for pin, var in TOKEN_MAPS.items()})


def make_token_maps(pin_dir: str) -> dict[str, int]:
    """The token program's maps alone, made and pinned in PIN_DIR (or
    reused when there), by pin name: the caller's fds to close. For libxdp,
    which loads the program itself (pyxdp.xdp.dispatcher)."""
    with logged("zerolayer-xdp-") as log_path, opened_token(pin_dir, log_path) as (obj, name):
        try:
            obj.load(programs=False)
        except OSError as exc:
            raise load_error(name, exc, log_path) from None
        return {pin: obj.map_fd(var) for pin, var in TOKEN_MAPS.items()}


def load(build: Build, function: str, *,
         maps: dict[str, str] | None = None, also: tuple[str, ...] = (),
         reuse: dict[str, int] | None = None,
         sizes: dict[str, int] | None = None, rodata: bytes | None = None,
         attach: bool = False) -> Loaded:
    """BUILD's object, loaded by libbpf with FUNCTION and the programs in
    ALSO, each of the kind its section names.
    REUSE: map variables to use the given fds for (libbpf dups them);
    SIZES: map variables' sizes for this load; RODATA: the object's
    `const volatile` data. ATTACH: the tracepoint programs attached where
    their sections say. MAPS: the fds to keep, of map variables by the names
    to keep them by."""
    with logged(f"zerolayer-{Path(build.source).stem}-") as log_path:
        obj = libbpf.BpfObject(build.image(log_path), build.source)
        loaded = Loaded(-1, function)
        try:
            for var, fd in (reuse or {}).items():
                obj.reuse_map(var, fd)
            for var, entries in (sizes or {}).items():
                obj.set_max_entries(var, entries)
            if rodata is not None:
                obj.set_rodata(rodata)
            wanted = (function, *also)
            obj.load(only=wanted)
            loaded.prog_fds = {name: obj.program_fd(name) for name in wanted}
            loaded.prog_fd = loaded.prog_fds[function]
            loaded.map_fds = {pin: obj.map_fd(var) for pin, var in (maps or {}).items()}
            if attach:
                sections = obj.programs()
                for name in wanted:
                    if sections[name].startswith(("tracepoint/", "raw_tracepoint/")):
                        loaded.links.append(obj.attach(name))
        except OSError as exc:
            loaded.close()
            raise _load_failed(function, exc, log_path) from None
        except BaseException:
            loaded.close()
            raise
        finally:
            obj.close()  # what we keep, we hold by our own fds and links
    return loaded


# Helpers newer than the oldest kernel checked (5.10) that a program calls,
# by number (enum bpf_func_id): the first Linux that has each.
HELPERS_SINCE = {188: ("bpf_xdp_get_buff_len", "5.18"), 189: ("bpf_xdp_load_bytes", "5.18"),
                 190: ("bpf_xdp_store_bytes", "5.18")}
# The verifier's words for a helper it does not know.
_UNKNOWN_FUNC = re.compile(r"(?:invalid|unknown) func \w*#(\d+)")


def _load_failed(name: str, exc: OSError, log_path: str) -> ZerolayerError:
    """One line for a load that failed: a helper this kernel lacks, the
    verifier's refusal, or what else went wrong."""
    with open(log_path, errors="replace") as log:
        unknown = _UNKNOWN_FUNC.search(log.read())
    if unknown and int(unknown.group(1)) in HELPERS_SINCE:
        helper, since = HELPERS_SINCE[int(unknown.group(1))]
        return ZerolayerError(
            f"{name} needs the BPF helper {helper}, which this kernel ({platform.release()}) "
            f"lacks: it needs Linux {since} or newer (verifier log: {log_path})")
    return load_error(name, exc, log_path)
