# SPDX-License-Identifier: Apache-2.0
"""The ways out for forwarded datagrams: the egress devmap, and what the
kernel must allow before bpf_fib_lookup routes anything (docs/spec.md §2.1).

The devmap is a DEVMAP_HASH keyed by ifindex, holding every interface of
the namespace but loopback: the FIB picks the egress, the map only says
which interfaces a redirect may use (one the program cannot find there is
`not_forwardable`). It is made here with bpf(2) and pinned as `egress`
beside the program's other maps, then handed to the program's declaration
of it (bpf/zl_maps.h): libbpf before 1.6 cannot reuse a pinned devmap
itself (it compares the flags it asked for with those the kernel forces on
every devmap, BPF_F_RDONLY_PROG, and finds them different). It is filled
at attach and by `config --forward on`; an interface made
later is not in it until then, and one deleted leaves it by itself.

What forwarding needs from the kernel and the egress devices is checked
here and said in one line each, never changed behind the user's back:
- the FIB routes only when forwarding is on for the ingress interface
  (net.ipv4.conf.IFACE.forwarding, net.ipv6.conf.IFACE.forwarding), and
  answers "forwarding disabled" otherwise;
- a veth accepts redirected frames only when its peer runs NAPI: an XDP
  program on the peer, or GRO on (Linux 5.13+; before it, only the XDP
  program). Without either the kernel drops every frame redirected to it.
- some NIC drivers (virtio_net, i40e, ...) take redirected frames only while
  an XDP program runs on the egress device itself, and drop them otherwise,
  after zerolayer's program has counted them forwarded. The kernel says so
  in the device's XDP features (Linux 6.3+, pyxdp.kernel.xdp_features);
  before 6.3 nothing tells, and nothing is said.
"""

import contextlib
import os
import struct

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import bpfsys, release, xdp_features
from pyxdp.kernel import netns as netns_mod
from pyxdp.kernel.ethtool import gro_enabled
from pyxdp.xdp import netlink
from pyxdp.xdp.maps import EGRESS_MAX, SPECS, BpfMap

PIN = "egress"
# Since this release GRO on a veth's peer runs the NAPI that takes redirected
# frames ("veth: allow enabling NAPI even without XDP"); before it only an
# XDP program on the peer does.
VETH_NAPI_BY_GRO = (5, 13)
BPF_MAP_TYPE_DEVMAP_HASH = 25
_IFINDEX = struct.Struct("=I")


def open_map(pin_dir: str | None) -> int:
    """The egress devmap's fd: the one pinned in PIN_DIR (an upgrade keeps
    it), else a new one, pinned there when PIN_DIR is given (None: private,
    for test runs). The caller closes the fd."""
    path = os.path.join(pin_dir, PIN) if pin_dir else None
    if path and os.path.exists(path):
        fd = bpfsys.obj_get(path)
        BpfMap(fd, PIN, owned=False).check(SPECS[PIN])
        return fd
    spec = SPECS[PIN]
    fd = bpfsys.map_create(BPF_MAP_TYPE_DEVMAP_HASH, spec.key_size, spec.value_size,
                           EGRESS_MAX, "zl_egress")
    if path:
        try:
            bpfsys.obj_pin(fd, path)
        except BaseException:
            os.close(fd)
            raise
    return fd


def fill(fd: int, netns: str | None) -> list[str]:
    """Make the devmap hold exactly the namespace's interfaces but loopback;
    return their names, by ifindex."""
    links = [s for s in netlink.query_all(netns) if s.ifname != "lo"]
    if len(links) > EGRESS_MAX:
        raise ZerolayerError(f"{len(links)} interfaces: the egress map holds {EGRESS_MAX}")
    wanted = {s.ifindex for s in links}
    # The entries of another namespace are refused by the kernel: enter it.
    with netns_mod.entered(netns):
        for ifindex in sorted(wanted):
            key = _IFINDEX.pack(ifindex)
            bpfsys.map_update(fd, key, key)
        for key in bpfsys.map_keys(fd, _IFINDEX.size):
            if _IFINDEX.unpack(key)[0] not in wanted:
                with contextlib.suppress(FileNotFoundError):
                    bpfsys.map_delete(fd, key)
    return [s.ifname for s in links]


def names(fd: int, netns: str | None) -> list[str]:
    """The interfaces in the devmap now, by ifindex."""
    held = {_IFINDEX.unpack(k)[0] for k in bpfsys.map_keys(fd, _IFINDEX.size)}
    return [s.ifname for s in netlink.query_all(netns) if s.ifindex in held]


def notes(ifname: str, netns: str | None, egress: list[str]) -> list[str]:
    """What stops forwarding from IFNAME out of EGRESS, one line each."""
    out = []
    off = [v for v in ("ipv4", "ipv6") if not _forwarding_on(v, ifname, netns)]
    if off:
        where = f" in netns {netns}" if netns else ""
        keys = " and ".join(f"net.{v}.conf.{ifname}.forwarding" for v in off)
        out.append(f"forwarding is off for {ifname}{where} ({keys} = 0): the kernel's FIB "
                   f"routes nothing for it, so every token datagram counts as "
                   f"not_forwardable; turn it on with sysctl (zerolayer leaves it alone)")
    peers = netlink.veth_peers(egress, netns)
    out += [line for name in egress if name in peers and (line := _veth_note(name, peers[name]))]
    out += _redirect_target_notes([name for name in egress if name not in peers], netns)
    return out


def _redirect_target_notes(names: list[str], netns: str | None) -> list[str]:
    """For each of NAMES that runs no XDP program and whose driver has XDP
    but takes no redirected frames now: what to do about it."""
    out = []
    for state in netlink.query_all(netns):
        if state.ifname not in names or state.mode is not None:
            continue
        features = xdp_features.read(state.ifindex, netns)
        if features is None or not features.redirect_target_only_with_a_program:
            continue
        attach = f"zerolayer attach {state.ifname}" + (f" --netns {netns}" if netns else "")
        out.append(f"{state.ifname} takes no redirected frames while no XDP program runs on it "
                   f"(its driver's XDP features say so): the kernel drops every datagram "
                   f"forwarded out of {state.ifname}; attach one there (`{attach}`)")
    return out


def _forwarding_on(version: str, ifname: str, netns: str | None) -> bool:
    with netns_mod.entered(netns):
        try:
            with open(f"/proc/sys/net/{version}/conf/{ifname}/forwarding") as f:
                return f.read().strip() != "0"
        except FileNotFoundError:  # IPv6 off on the interface: nothing to route
            return version == "ipv6"


def gro_takes_redirects() -> bool:
    """Whether GRO on a veth's peer is enough for it to take redirected frames."""
    return release.at_least(*VETH_NAPI_BY_GRO)


def _veth_note(name: str, peer: netlink.VethPeer) -> str | None:
    """None when veth NAME's PEER accepts redirected frames; otherwise what
    to do about it."""
    by_gro = gro_takes_redirects()
    if peer.ifname is None:
        needs = "runs an XDP program or has GRO on" if by_gro else "runs an XDP program"
        return (f"{name} is a veth whose peer is in a namespace zerolayer cannot see: it "
                f"accepts forwarded frames only if the peer {needs}")
    if peer.xdp:
        return None
    if by_gro:
        with netns_mod.entered(peer.netns):
            if gro_enabled(peer.ifname):
                return None
    where = f" (netns {peer.netns})" if peer.netns else ""
    attach = f"zerolayer attach {peer.ifname}" + (f" --netns {peer.netns}" if peer.netns else "")
    if not by_gro:
        return (f"{name} is a veth whose peer {peer.ifname}{where} runs no XDP program: the "
                f"kernel drops every datagram forwarded out of {name} (before Linux 5.13 GRO "
                f"is not enough); attach an XDP program to it (`{attach}`)")
    ethtool = ((f"ip netns exec {peer.netns} " if peer.netns else "")
               + f"ethtool -K {peer.ifname} gro on")
    return (f"{name} is a veth whose peer {peer.ifname}{where} runs no XDP program and has "
            f"GRO off: the kernel drops every datagram forwarded out of {name}; turn GRO on "
            f"there (`{ethtool}`) or attach an XDP program to it (`{attach}`)")
