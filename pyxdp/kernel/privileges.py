# SPDX-License-Identifier: Apache-2.0
"""Checks that the process may load BPF programs and change links."""

from pyxdp.errors import ZerolayerError
from pyxdp.kernel.bpffs import require_bpffs

CAP_NET_ADMIN = 12
CAP_NET_RAW = 13
CAP_SYS_ADMIN = 21
CAP_BPF = 39


def _effective_caps() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def preflight(action: str) -> None:
    """What every command reading or writing zerolayer's pins needs: the
    capabilities, and bpffs mounted."""
    require_bpf_admin(action)
    require_bpffs()


def require_net_raw(action: str) -> None:
    """Raise unless we hold CAP_NET_RAW, which an AF_XDP socket needs."""
    if not _effective_caps() & (1 << CAP_NET_RAW):
        raise ZerolayerError(f"{action} needs root (CAP_NET_RAW, for an AF_XDP socket): "
                             "run it with sudo")


def require_bpf_admin(action: str) -> None:
    """Raise unless we hold CAP_NET_ADMIN and either CAP_BPF or CAP_SYS_ADMIN."""
    caps = _effective_caps()
    has = lambda cap: bool(caps & (1 << cap))  # noqa: E731
    if has(CAP_NET_ADMIN) and (has(CAP_BPF) or has(CAP_SYS_ADMIN)):
        return
    raise ZerolayerError(
        f"{action} needs root (CAP_BPF and CAP_NET_ADMIN): run it with sudo"
    )
