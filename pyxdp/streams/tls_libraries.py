# SPDX-License-Identifier: Apache-2.0
"""The one table of TLS libraries the stream observer probes (docs/spec.md
§11.1): for each, the files it is mapped from, and for each function the
probes take, the program of bpf/streams.bpf.c that runs at its entry and at
its return, and how that program reads the function's arguments and
result. A new library is one row here plus its programs in the C
(CONTRIBUTING.md, "Adding a TLS library").

A library is found by the path a process maps it from, or (files None) as
the process's own executable, where that exports the functions: OpenSSL
linked into Node's official builds. Stacks that export nothing (Go's
crypto/tls, stripped static BoringSSL in Envoy or Bun, rustls) have no row.
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Function:
    symbol: str  # the exported function, looked up in the file's .dynsym
    entry: str  # the program of bpf/streams.bpf.c on its entry
    ret: str  # the program on its return
    convention: str  # what the programs read: the arguments and the result


@dataclass(frozen=True)
class TlsLibrary:
    name: str
    # a mapped path, as /proc/PID/maps shows it; None: the process's own
    # executable, probed where the process maps no library of another row
    files: re.Pattern | None
    functions: tuple[Function, ...]

    def symbols(self) -> tuple[str, ...]:
        return tuple(f.symbol for f in self.functions)

    def function(self, symbol: str) -> Function:
        return next(f for f in self.functions if f.symbol == symbol)


# One return program serves every OpenSSL function: it reads the count as
# the entry program said to (the result, or the size_t the _ex call filled).
_OPENSSL_RETURN = "zl_st_ssl_return"

OPENSSL = TlsLibrary(
    "OpenSSL",
    # libssl.so.3 and .1.1, the ABIs of these functions; " (deleted)" once the
    # file is gone from its directory (an upgrade under a running service):
    # still probed, through map_files.
    re.compile(r"/libssl\.so\.(3|1\.1)( \(deleted\))?$"),
    (
        Function("SSL_read", "zl_st_ssl_read", _OPENSSL_RETURN,
                 "(ssl, buf, num): the result is the bytes read into buf, <= 0 none"),
        Function("SSL_write", "zl_st_ssl_write", _OPENSSL_RETURN,
                 "(ssl, buf, num): the result is the bytes written from buf, <= 0 none"),
        Function("SSL_read_ex", "zl_st_ssl_read_ex", _OPENSSL_RETURN,
                 "(ssl, buf, num, size_t *readbytes): result 1, the count in *readbytes"),
        Function("SSL_write_ex", "zl_st_ssl_write_ex", _OPENSSL_RETURN,
                 "(ssl, buf, num, size_t *written): result 1, the count in *written"),
    ),
)

# GnuTLS (wget, git's https through libcurl-gnutls, Emacs): its record
# calls have SSL_read's and SSL_write's convention, so OpenSSL's programs
# serve them. ssize_t results: a record is far below the int the return
# program reads.
GNUTLS = TlsLibrary(
    "GnuTLS",
    # libgnutls.so.30 (the ABI since GnuTLS 3.4) is a link to the file
    # /proc/PID/maps shows, libgnutls.so.30.N.M.
    re.compile(r"/libgnutls\.so\.30(\.[0-9]+)*( \(deleted\))?$"),
    (
        Function("gnutls_record_recv", "zl_st_ssl_read", _OPENSSL_RETURN,
                 "(session, data, size): the result is the bytes read into data, <= 0 none"),
        Function("gnutls_record_send", "zl_st_ssl_write", _OPENSSL_RETURN,
                 "(session, data, size): the result is the bytes written from data, <= 0 none"),
    ),
)

# OpenSSL linked into the executable and exported from it, as Node's
# official builds do (`node` maps no libssl): OpenSSL's functions and programs.
OPENSSL_IN_EXECUTABLE = TlsLibrary("OpenSSL in the executable", None, OPENSSL.functions)

TLS_LIBRARIES = (OPENSSL, GNUTLS, OPENSSL_IN_EXECUTABLE)
IN_EXECUTABLE = tuple(library for library in TLS_LIBRARIES if library.files is None)


def library_of(path: str) -> TlsLibrary | None:
    """The row whose files PATH is, or None."""
    for library in TLS_LIBRARIES:
        if library.files is not None and library.files.search(path):
            return library
    return None


def programs() -> tuple[str, ...]:
    """Every entry and return program the rows name, each once, in order."""
    names: dict[str, None] = {}
    for library in TLS_LIBRARIES:
        for f in library.functions:
            names[f.entry] = names[f.ret] = None
    return tuple(names)
