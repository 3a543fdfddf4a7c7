# SPDX-License-Identifier: Apache-2.0
"""What an exited process leaves in the program's maps, cleared.

The program keys a connection by process and fd (or SSL object) and
forgets it at close(2). A process that exits with sockets open leaves its
entries behind (the kernel closes them with no system call), and a later
process given the same pid would find them: its socket ignored as not HTTP,
or its connection continued from the dead one's state. The program reports
the exit of every process it holds state for (ZL_ST_EXIT); this clears
that process's entries, in one pass over the maps at most every
PASS_EVERY_S, so many exits cost one pass."""

import time

from pyxdp.kernel.bpf_table import Table

PASS_EVERY_S = 1.0

# Maps whose key starts with the process (struct zl_st_key, struct zl_st_link).
_BY_PROCESS = ("zl_st_conns", "zl_st_ignored", "zl_st_ssl_fds", "zl_st_fd_ssls")
# Maps keyed by thread (pid_tgid): the process is its upper half.
_BY_THREAD = ("zl_st_bio_threads",)


class Leftovers:
    """exited(tgid) for each reported exit; clear_due() in the read loop."""

    def __init__(self, tables: dict[str, Table]):
        self._tables = [*((tables[name], 0) for name in _BY_PROCESS),
                        *((tables[name], 32) for name in _BY_THREAD)]
        self._exited: set[int] = set()
        self._last_pass = 0.0

    def exited(self, tgid: int) -> None:
        self._exited.add(tgid)

    def clear_due(self) -> None:
        """One pass over the maps, when a process has exited since the last
        and the last is PASS_EVERY_S old."""
        now = time.monotonic()
        if not self._exited or now - self._last_pass < PASS_EVERY_S:
            return
        self._last_pass = now
        gone, self._exited = self._exited, set()
        for table, shift in self._tables:
            for key in [k for k in table.keys() if k[0] >> shift in gone]:
                table.delete(key)  # False: evicted meanwhile (LRU)
