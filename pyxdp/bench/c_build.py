# SPDX-License-Identifier: Apache-2.0
"""The C programs the bench runs beside zerolayer's (the AF_XDP consumer,
the splice relay), compiled at bench time with the system's C compiler into
a directory the caller made for the run and removes after it. Nothing is
cached: root runs only what it has just built itself, never a binary left
in a shared directory."""

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

COMPILERS = ("cc", "gcc", "clang")
CFLAGS = ("-O2", "-Wall")


class NoCompiler(Exception):
    """No C compiler on PATH; the message says which were looked for."""


@dataclass(frozen=True)
class Compiled:
    binary: str | None  # None: the compiler failed, stderr says why
    compiler: str  # the compiler's first --version line
    stderr: str

    def first_error(self) -> str:
        lines = self.stderr.strip().splitlines()
        return next((ln.strip() for ln in lines if "error:" in ln),
                    lines[-1].strip() if lines else "no output")


def compile_c(source: Path, workdir: str, libs: tuple[str, ...] = ()) -> Compiled:
    """SOURCE compiled and linked with LIBS into WORKDIR/<its stem>."""
    cc = next((path for name in COMPILERS if (path := shutil.which(name))), None)
    if cc is None:
        raise NoCompiler(f"no C compiler ({', '.join(COMPILERS)}) on PATH")
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    compiler = (version.stdout.splitlines() or [cc])[0]
    binary = os.path.join(workdir, source.stem)
    proc = subprocess.run([cc, *CFLAGS, "-o", binary, str(source), *libs],
                          capture_output=True, text=True, timeout=120)
    return Compiled(binary if proc.returncode == 0 else None, compiler, proc.stderr)


def command(source: Path, libs: tuple[str, ...] = ()) -> str:
    """The build command, as a report shows it."""
    return " ".join(["cc", *CFLAGS, source.name, *libs])
