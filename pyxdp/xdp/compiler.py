# SPDX-License-Identifier: Apache-2.0
"""Compile and load the C programs, and turn their failures into one line
each: the token program with clang into a BPF object loaded by libbpf
(pyxdp.xdp.objects, pyxdp.xdp.libbpf), the others with bcc.

Every compile gets the constants the C shares with Python as -D
definitions, made from the Python ones by shared_defines(): the C defines
none of them itself, so the two cannot drift (docs/spec.md §7.2).

bcc, clang and libbpf write diagnostics and verifier logs straight to file
descriptor 2. We point fd 2 at a log file while they run, keep that file when
something fails, and name it in the one-line error.
"""

import contextlib
import os
import platform
import re
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyxdp.bpf import SOURCE_DIR
from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys
from pyxdp.proto import counters, ethernet, frames, judge
from pyxdp.xdp import dispatcher, egress, libbpf, objects, parsers
from pyxdp.xdp import maps as token_maps

TOKEN_SOURCE = "xdp_token.c"
# The object's read-only data: zl_generation alone (xdp_token.c).
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


def compile_flags(extra: tuple[str, ...] = ()) -> list[str]:
    """What bcc compiles every program with: the source directory on the
    include path, the shared definitions and EXTRA -D definitions (a
    program's own: the relay's and the generator's come from their modules,
    above this one)."""
    return [f"-I{source_dir()}", *define_flags(shared_defines()), *extra]


def require_kernel_headers() -> None:
    release = platform.release()
    build = f"/lib/modules/{release}/build"
    # Debian splits a headers tree: generated files under build, the rest
    # (kconfig.h among them) under source.
    if os.environ.get("BCC_KERNEL_SOURCE") or any(
        os.path.exists(f"/lib/modules/{release}/{tree}/include/linux/kconfig.h")
        for tree in ("build", "source")
    ):
        return
    raise ZerolayerError(
        f"no kernel headers for {release} in {build}: run `bash vagrant/provision.sh` "
        "(it installs linux-headers and links them there)"
    )


@contextlib.contextmanager
def _stderr_to(log_path: str):
    """Send fd 2 (where bcc, clang and the verifier log write) to LOG_PATH."""
    saved = os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# bcc's diagnosis of a rejection that names a helper the kernel lacks.
_MISSING = re.compile(r"HINT: (\w+) missing \(added in Linux ([\d.]+)\)")


def _missing_helper(log_path: str) -> tuple[str, str] | None:
    """(helper, first Linux version with it) when the verifier rejected a
    program for calling a helper this kernel does not have."""
    with open(log_path, errors="replace") as log:
        found = _MISSING.search(log.read())
    return (found.group(1), found.group(2)) if found else None


def _first_error(log_path: str) -> str:
    with open(log_path, errors="replace") as log:
        lines = [ln.strip() for ln in log if ln.strip()]
    for ln in lines:
        if "error:" in ln:
            return ln
    return lines[-1] if lines else "no output"


@dataclass
class Loaded:
    """A program bcc compiled and the kernel accepted. bcc keeps its fds
    open until close() (or process exit): call it once the program is
    attached or pinned, so a long-lived process does not pile them up."""

    bpf: Any  # bcc.BPF, which has no type information
    prog_fd: int
    prog_name: str
    map_fds: dict[str, int] = field(default_factory=dict)
    # every loaded function's fd, FUNCTION's and ALSO's
    prog_fds: dict[str, int] = field(default_factory=dict)

    def close(self) -> None:
        self.bpf.cleanup()


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


def token_object(variant: str, log_path: str) -> bytes:
    """The token program's BPF object, built as VARIANT (cached)."""
    src = source_dir()
    flags = [f"-I{src}", f"-I{src / CLANG_INCLUDE}", *define_flags(shared_defines()),
             *token_flags(variant)]
    return objects.build(src, TOKEN_SOURCE, flags, log_path)


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


def load(source: str, function: str, *, directory: Path | None = None,
         maps: dict[str, str] | None = None,
         prog_type: int = bpfsys.BPF_PROG_TYPE_XDP, also: tuple[str, ...] = (),
         cflags: tuple[str, ...] = ()) -> Loaded:
    """Compile SOURCE in DIRECTORY (bpf/, source_dir(), unless told: a
    program outside the product, such as a bench floor, lives next to its
    user) and load FUNCTION, and the functions in ALSO, as programs of
    PROG_TYPE (XDP unless told). bpf/ stays on the include path either way.
    MAPS: the fds to keep, of map variables by the names to keep them by.
    CFLAGS are extra -D definitions, besides compile_flags()'s."""
    require_kernel_headers()
    try:
        from bcc import BPF
    except ImportError:
        raise ZerolayerError(
            "bcc is not importable: install python3-bpfcc and use a venv made with "
            "--system-site-packages (vagrant/provision.sh does both)"
        ) from None

    src = directory or source_dir()
    flags = compile_flags(cflags)
    fd, log_path = tempfile.mkstemp(prefix="zerolayer-bcc-", suffix=".log")
    os.close(fd)
    keep_log = True
    try:
        with _stderr_to(log_path):
            try:
                program = BPF(src_file=str(src / source).encode(), cflags=flags)
            except Exception:
                raise ZerolayerError(
                    f"compiling {source} failed: {_first_error(log_path)} (full log: {log_path})"
                ) from None
            prog_fds = {}
            for name in (function, *also):
                try:
                    prog_fds[name] = program.load_func(name.encode(), prog_type).fd
                except Exception as exc:
                    program.cleanup()  # its maps and BTF, which nothing else will close
                    missing = _missing_helper(log_path)
                    if missing:
                        raise ZerolayerError(
                            f"{name} needs the BPF helper {missing[0]}, which this kernel "
                            f"({platform.release()}) lacks: it needs Linux {missing[1]} or "
                            f"newer (verifier log: {log_path})"
                        ) from None
                    raise ZerolayerError(
                        f"the kernel verifier rejected {name} ({exc}); "
                        f"verifier log: {log_path}"
                    ) from None
        keep_log = False
        fds = {pin: program[var.encode()].map_fd for pin, var in (maps or {}).items()}
        return Loaded(program, prog_fds[function], function, fds, prog_fds)
    finally:
        if not keep_log:
            os.unlink(log_path)
