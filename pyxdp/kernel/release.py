# SPDX-License-Identifier: Apache-2.0
"""The running kernel's version, for the few behaviours no cheap probe shows
(a veth's NAPI, for one: pyxdp.xdp.egress)."""

import functools
import platform
import re


@functools.cache
def version() -> tuple[int, int]:
    """(major, minor) of the running kernel; (0, 0) if the release string
    does not start with them."""
    found = re.match(r"(\d+)\.(\d+)", platform.release())
    return (int(found[1]), int(found[2])) if found else (0, 0)


def at_least(major: int, minor: int) -> bool:
    return version() >= (major, minor)
