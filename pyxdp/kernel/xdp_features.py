# SPDX-License-Identifier: Apache-2.0
"""What a device's driver says it can do with XDP, from the kernel's
`netdev` generic netlink family (Linux 6.3+; `ynl --family netdev --do
dev-get` prints the same). Before 6.3 there is no such family, and nothing
is known: None.

The one bit zerolayer reads is NDO_XMIT: whether the device takes frames
another device's XDP program redirects to it now. Some drivers (virtio_net,
i40e, ...) set it only while an XDP program runs on the device itself.
"""

from dataclasses import dataclass

from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.off_loop import off_event_loop

# enum netdev_xdp_act (include/uapi/linux/netdev.h)
NDO_XMIT = 1 << 2
XSK_ZEROCOPY = 1 << 3
_FAMILY = "netdev"
_CMD_DEV_GET = 1


@dataclass(frozen=True)
class XdpFeatures:
    flags: int

    @property
    def redirect_target(self) -> bool:
        return bool(self.flags & NDO_XMIT)

    @property
    def redirect_target_only_with_a_program(self) -> bool:
        """The driver has XDP but takes frames redirected (or sent by a
        live-frames test run) only while an XDP program runs on the device
        (virtio_net, i40e, ...). flags 0: no XDP at all (a bridge, a dummy),
        which no program would change."""
        return bool(self.flags) and not self.redirect_target

    @property
    def xsk_zerocopy(self) -> bool:
        return bool(self.flags & XSK_ZEROCOPY)


def _message_class():
    from pyroute2.netlink import genlmsg

    class DevMessage(genlmsg):
        # enum netdev_a_dev, in order
        nla_map = (("NETDEV_A_DEV_UNSPEC", "none"),
                   ("NETDEV_A_DEV_IFINDEX", "uint32"),
                   ("NETDEV_A_DEV_PAD", "none"),
                   ("NETDEV_A_DEV_XDP_FEATURES", "uint64"))
    return DevMessage


@off_event_loop
def read(ifindex: int, netns: str | None = None) -> XdpFeatures | None:
    """The XDP features of device IFINDEX in NETNS; None where the kernel
    has no netdev family (before 6.3) or does not answer for the device."""
    from pyroute2.netlink import NLM_F_REQUEST
    from pyroute2.netlink.exceptions import NetlinkError
    from pyroute2.netlink.generic import GenericNetlinkSocket

    message_class = _message_class()
    with netns_mod.entered(netns):
        sock = GenericNetlinkSocket()
    try:
        try:
            sock.bind(_FAMILY, message_class)
        except NetlinkError:
            return None  # no such family: before Linux 6.3
        request = message_class()
        request["cmd"] = _CMD_DEV_GET
        request["version"] = 1
        request["attrs"] = [("NETDEV_A_DEV_IFINDEX", ifindex)]
        try:
            replies = sock.nlm_request(request, msg_type=sock.prid, msg_flags=NLM_F_REQUEST)
        except NetlinkError:
            return None
        for reply in replies:
            flags = reply.get_attr("NETDEV_A_DEV_XDP_FEATURES")
            if flags is not None:
                return XdpFeatures(flags)
        return None
    finally:
        sock.close()
