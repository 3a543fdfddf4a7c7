# SPDX-License-Identifier: Apache-2.0
"""One `zerolayer apply` at a time. Each action also holds its interface's
lock (pyxdp.xdp.iface_lock); this one keeps two applies from planning on
what the other is changing. flock(2) dies with its holder; the file is
never removed (a waiter would otherwise hold a lock nobody else sees)."""

from pyxdp.xdp import iface_lock

NAME = "apply.lock"  # in /run/zerolayer, checked to be root's like the interfaces' locks


def held(wait_s: float, stopped=lambda: False):
    """Hold the apply lock for the block, waiting up to WAIT_S seconds (or
    until STOPPED()); a one-line error, with nothing changed, if it stays
    taken."""
    return iface_lock.file_held((NAME,), wait_s, lambda holder: (
        f"another zerolayer apply{holder} is running; nothing was changed: try again, "
        "or wait longer with --wait SECONDS"), stopped)
