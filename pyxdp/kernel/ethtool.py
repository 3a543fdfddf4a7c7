"""The rx queues a driver runs, from ethtool's channels (SIOCETHTOOL).

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
ETHTOOL_GCHANNELS = 0x3C
# struct ethtool_channels: cmd, then max_rx/tx/other/combined, then
# rx/tx/other/combined counts.
_CHANNELS = struct.Struct("=9I")
_RX_COUNT, _COMBINED_COUNT = 5, 8


def rx_queues_in_use(ifname: str, allocated: int) -> int:
    """The rx queues IFNAME runs: its rx and combined channels. Call it in
    the interface's network namespace. A driver that reports no channels
    (lo, some virtual devices) runs every queue it ALLOCATED."""
    channels = ctypes.create_string_buffer(_CHANNELS.pack(ETHTOOL_GCHANNELS, *(0,) * 8))
    ifreq = struct.pack("16sQ16x", ifname.encode(), ctypes.addressof(channels))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
        except OSError:  # EOPNOTSUPP: no channels to report
            return allocated
    counts = _CHANNELS.unpack_from(channels.raw)
    return counts[_RX_COUNT] + counts[_COMBINED_COUNT] or allocated
