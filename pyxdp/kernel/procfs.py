# SPDX-License-Identifier: Apache-2.0
"""What /proc says of another process's open files: their links, read with
readlink (never followed, never opened), so a user's process cannot make
root open anything by what it holds."""

import os
from collections.abc import Iterator


def fd_links(pid: int) -> Iterator[tuple[str, str]]:
    """(fd, what /proc/PID/fd/FD links to) for each open file of PID; none
    once it is gone, and a file closed meanwhile is left out."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    for fd in fds:
        try:
            yield fd, os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
