# SPDX-License-Identifier: Apache-2.0
"""The installed `zerolayer` command, run in a new process as a user would."""

import os
import subprocess
import sys

ZEROLAYER = os.path.join(os.path.dirname(sys.executable), "zerolayer")


def run_cli(*args, check=False, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([ZEROLAYER, *map(str, args)], capture_output=True, text=True,
                          timeout=120, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"zerolayer {' '.join(map(str, args))} failed: {proc.stderr}")
    return proc
