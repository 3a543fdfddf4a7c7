# SPDX-License-Identifier: Apache-2.0
"""The kernel's counters of this thread's network namespace in
/proc/net/snmp and /proc/net/netstat: per group ("Udp", "TcpExt"), a line
of names and a line of values."""


def read(group: str, table: str = "snmp") -> dict[str, int]:
    """GROUP's counters of /proc/net/TABLE, as this thread's namespace sees
    them; empty when the kernel has no such group."""
    with open(f"/proc/thread-self/net/{table}") as f:
        rows = [line.split() for line in f if line.startswith(f"{group}:")]
    if len(rows) < 2:
        return {}
    return dict(zip(rows[0][1:], map(int, rows[1][1:])))
