# SPDX-License-Identifier: Apache-2.0
"""The commands the suite starts get SIGINT as a terminal gives it. A
suite started in the background by a script (`bash .ci/run &`) inherits
SIGINT ignored, as POSIX has a non-interactive shell's background jobs do;
every command started from it would ignore it too, and the tests that stop
`listen`, `stats --watch` or `streams` with SIGINT would wait for nothing.
Python's own handler is put back once, for the session: the children then
start with SIGINT at its default."""

import signal


def pytest_configure(config):
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
