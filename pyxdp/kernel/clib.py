# SPDX-License-Identifier: Apache-2.0
"""The system's C libraries through ctypes: opened once, each function bound
with its types, and a missing library said in one line."""

import ctypes

from pyxdp.errors import ZerolayerError


def open_library(soname: str, package: str) -> ctypes.CDLL:
    """SONAME (errno kept), or a one-line error naming the Debian PACKAGE."""
    try:
        return ctypes.CDLL(soname, use_errno=True)
    except OSError:
        raise ZerolayerError(
            f"{soname} is missing: install {package} (`bash vagrant/provision.sh` does)"
        ) from None


def bind(lib: ctypes.CDLL, name: str, restype, *argtypes):
    """LIB's function NAME, with its result and argument types set."""
    func = getattr(lib, name)
    func.restype = restype
    func.argtypes = list(argtypes)
    return func
