# SPDX-License-Identifier: Apache-2.0
"""What zerolayer asks a driver through SIOCETHTOOL: its name, the rx
queues it runs (ethtool's channels) and whether GRO is on.

A device allocates its queues once (IFLA_NUM_RX_QUEUES) and runs as many of
them as its channels say (`ethtool -l`). The two differ on a default veth
(allocated: one per possible CPU; running: 1) and on real NICs (ENA, mlx5,
ice allocate for the most channels they could run). An AF_XDP socket can be
bound only to a queue that runs, so every queue count zerolayer uses comes
from here.
"""

import ctypes
import fcntl
import socket
import struct

SIOCETHTOOL = 0x8946
ETHTOOL_GDRVINFO = 0x03
ETHTOOL_GCHANNELS = 0x3C
ETHTOOL_GGRO = 0x2B
ETHTOOL_SGRO = 0x2C
_VALUE = struct.Struct("=II")  # struct ethtool_value: cmd, data
# struct ethtool_channels: cmd, then max_rx/tx/other/combined, then
# rx/tx/other/combined counts.
_CHANNELS = struct.Struct("=9I")
_RX_COUNT, _COMBINED_COUNT = 5, 8
# struct ethtool_drvinfo: cmd, driver[32], then fields zerolayer does not read.
_DRVINFO_SIZE = 196


def driver_name(ifname: str) -> str | None:
    """The driver of IFNAME (`ethtool -i`'s driver), in the calling
    thread's network namespace; None if it does not say."""
    info = ctypes.create_string_buffer(struct.pack("=I", ETHTOOL_GDRVINFO), _DRVINFO_SIZE)
    if not _ask(ifname, info):
        return None
    return info.raw[4:36].split(b"\0", 1)[0].decode(errors="replace") or None


def rx_queues_in_use(ifname: str, allocated: int) -> int:
    """The rx queues IFNAME runs: its rx and combined channels. Call it in
    the interface's network namespace. A driver that reports no channels
    (lo, some virtual devices) runs every queue it ALLOCATED."""
    channels = ctypes.create_string_buffer(_CHANNELS.pack(ETHTOOL_GCHANNELS, *(0,) * 8))
    if not _ask(ifname, channels):  # EOPNOTSUPP: no channels to report
        return allocated
    counts = _CHANNELS.unpack_from(channels.raw)
    return counts[_RX_COUNT] + counts[_COMBINED_COUNT] or allocated


def gro_enabled(ifname: str) -> bool:
    """Whether GRO is on for IFNAME (`ethtool -k`'s generic-receive-offload),
    in the calling thread's network namespace."""
    value = ctypes.create_string_buffer(_VALUE.pack(ETHTOOL_GGRO, 0))
    return _ask(ifname, value) and bool(_VALUE.unpack_from(value.raw)[1])


def set_gro(ifname: str, on: bool) -> None:
    """`ethtool -K IFNAME gro on|off`, in the calling thread's namespace."""
    value = ctypes.create_string_buffer(_VALUE.pack(ETHTOOL_SGRO, int(on)))
    if not _ask(ifname, value):
        raise OSError(f"cannot set GRO {'on' if on else 'off'} on {ifname}")


def _ask(ifname: str, request: ctypes.Array) -> bool:
    """One SIOCETHTOOL REQUEST (filled in place); False if the driver has no answer."""
    ifreq = struct.pack("16sQ16x", ifname.encode(), ctypes.addressof(request))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
        except OSError:
            return False
    return True
