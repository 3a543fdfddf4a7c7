# SPDX-License-Identifier: Apache-2.0
"""Wait, from user space, until every BPF program running now has finished.

An XDP program runs inside an RCU read-side section (softirq, or
rcu_read_lock() in generic XDP). membarrier(2) with MEMBARRIER_CMD_GLOBAL
returns only after an RCU grace period (synchronize_rcu() in
kernel/sched/membarrier.c), so every program run that started before the
call has ended when it returns. The port set (pyxdp/xdp/maps.py) relies on
this before it rewrites the half the last flip retired.
"""

import ctypes
import platform
import time

_SYS_MEMBARRIER = {"x86_64": 324, "aarch64": 283, "arm64": 283}
MEMBARRIER_CMD_GLOBAL = 1
# nohz_full kernels refuse MEMBARRIER_CMD_GLOBAL (EINVAL): then wait this
# long instead, ten thousand times the microseconds one program run takes.
FALLBACK_S = 0.05

_libc = ctypes.CDLL(None, use_errno=True)


def wait_for_running_programs() -> None:
    nr = _SYS_MEMBARRIER.get(platform.machine())
    if nr is not None and _libc.syscall(nr, MEMBARRIER_CMD_GLOBAL, 0) == 0:
        return
    time.sleep(FALLBACK_S)
