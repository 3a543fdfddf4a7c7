# SPDX-License-Identifier: Apache-2.0
"""The root qdisc of a named interface, set over netlink.

net.core.default_qdisc only applies to qdiscs created after it changes, so a
profile that wants fq also replaces the root qdisc of the interfaces it is
told about. Only a root the kernel attached by itself (handle 0:) is replaced;
a root someone configured (htb 1:, say) is left alone. For a multi-queue
device the kernel's root is mq, and it is the per-queue children that get the
new kind, as the kernel itself does with default_qdisc.

Revert deletes our root, and the kernel attaches its default again. That
default is built from net.core.default_qdisc, which is why a qdisc entry
expands to the root knobs *before* default_qdisc: revert, running backwards,
restores default_qdisc first, so the interface gets back exactly what it had.

Requests carry only the qdisc kind, like `tc qdisc replace dev X root KIND`
with no parameters, so the kernel picks every default. (pyroute2's tc()
fills in parameters of its own for kinds it has a plugin for, e.g. a pfifo
limit of 0 packets, so it is not used for writing.) The socket is made in the
calling thread, so inside a netns it talks to that netns.

The requests go through AsyncIPRoute under asyncio.run, so a knob cannot be
read or written from a thread that runs an event loop (use asyncio.to_thread).
pyroute2 0.9.7's synchronous IPRoute would not lift that (it drives an event
loop of its own, and fails the same way inside a running one), and its
nlm_request fails with KeyError 'nlm_generator', so it cannot send these.
"""

import asyncio
import ctypes
import errno
import os
import threading
from collections.abc import Sequence

from pyxdp.kernel.netns import CLONE_NEWNET
from pyxdp.tuning.kind import KnobSpec, text
from pyxdp.tuning.knobs import Knob, Unavailable, collapse, require_qdisc
from pyxdp.tuning.sysctl import Sysctl

TC_H_ROOT = 0xFFFFFFFF
_libc = ctypes.CDLL(None, use_errno=True)


def _run(work, ifname: str):
    """Run `await work(ipr, index)` on a fresh socket; netlink errors become OSError."""
    from pyroute2 import AsyncIPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    async def main():
        async with AsyncIPRoute() as ipr:
            found = await ipr.link_lookup(ifname=ifname)
            if not found:
                raise OSError(errno.ENODEV, f"no interface {ifname}")
            return await work(ipr, found[0])

    try:
        return asyncio.run(main())
    except NetlinkError as exc:
        raise OSError(exc.code, os.strerror(exc.code)) from None


async def _request(ipr, msg_type: int, index: int, parent: int, kind: str | None):
    from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_NEWQDISC
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    msg = tcmsg()
    msg["index"] = index
    msg["parent"] = parent
    msg["handle"] = 0
    if kind is not None:
        msg["attrs"] = [("TCA_KIND", kind)]
    flags = NLM_F_REQUEST | NLM_F_ACK
    if msg_type == RTM_NEWQDISC:
        flags |= NLM_F_CREATE | NLM_F_REPLACE
    async for _ in await ipr.nlm_request(msg, msg_type, flags):
        pass


async def _replace(ipr, index: int, parent: int, kind: str) -> None:
    from pyroute2.netlink.rtnl import RTM_NEWQDISC

    await _request(ipr, RTM_NEWQDISC, index, parent, kind)


async def _delete_root(ipr, index: int) -> None:
    from pyroute2.netlink.rtnl import RTM_DELQDISC

    await _request(ipr, RTM_DELQDISC, index, TC_H_ROOT, None)


async def _tree(ipr, index: int):
    """(root kind, root handle, {queue: child kind}) of the device."""
    qdiscs = [q async for q in await ipr.get_qdiscs(index) if q["index"] == index]
    roots = [q for q in qdiscs if q["parent"] == TC_H_ROOT]
    if not roots:
        return "noop", 0, {}  # a device that is down has no root yet
    root = roots[0]
    major = root["handle"] >> 16
    children = {
        q["parent"] & 0xFFFF: q.get_attr("TCA_KIND")
        for q in qdiscs
        if q["parent"] != TC_H_ROOT and q["parent"] >> 16 == major
    }
    return root.get_attr("TCA_KIND"), root["handle"], dict(sorted(children.items()))


def kind_known(kind: str) -> bool:
    """Whether the kernel knows qdisc KIND, asked without changing anything.

    A thread unshares into a new, empty netns and replaces the root qdisc of
    that namespace's own loopback; the namespace dies with the thread. The
    kernel answers ENOENT for a kind it does not have; any other answer (even
    a complaint about missing parameters) means the kind exists. Raises
    OSError if the namespace cannot be made (no CAP_SYS_ADMIN).
    """
    answer: dict = {}

    def probe():
        try:
            if _libc.unshare(CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                answer["error"] = OSError(err, os.strerror(err))
                return
            _run(lambda ipr, lo: _replace(ipr, lo, TC_H_ROOT, kind), "lo")
            answer["known"] = True
        except OSError as exc:
            answer["known"] = exc.errno != errno.ENOENT
        except Exception as exc:  # handed to the caller's thread
            answer["error"] = exc

    thread = threading.Thread(target=probe, name=f"qdisc-probe-{kind}")
    thread.start()
    thread.join()
    if "error" in answer:
        raise answer["error"]
    return answer["known"]


class RootQdisc(Knob):
    """The root qdisc of one interface. A profile entry (`kind = "qdisc"`) sets it on
    each --interface, then net.core.default_qdisc for the devices made later."""

    kind = "qdisc"
    required = {"value": text}
    scope = "netns"

    def __init__(self, host, facts, iface: str):
        super().__init__(host, facts)
        self.iface = iface

    @classmethod
    def expand(cls, spec: KnobSpec, host, facts, interfaces: Sequence[str]):
        # Roots first: the top of this module says why revert needs this order.
        roots = cls.per_interface(interfaces, lambda iface: cls(host, facts, iface),
                                  "IFACE root qdisc")
        return [*roots, Sysctl(host, facts, "net.core.default_qdisc", "global")]

    @property
    def params(self):
        return {"iface": self.iface}

    @property
    def label(self):
        return f"{self.iface} root qdisc"

    def _netlink(self, work):
        if self.host.fake:
            raise Unavailable(
                "a fake root has files only: root qdiscs are set over netlink",
                missing=False,
            )
        return _run(work, self.iface)

    @staticmethod
    def _render(kind, children) -> str:
        if kind == "mq" and children:
            return f"mq/{collapse({str(q): k for q, k in children.items()})}"
        return kind

    def read(self):
        kind, _, children = self._netlink(_tree)
        return self._render(kind, children)

    def target(self, value):
        require_qdisc(self.facts, value)
        kind, handle, children = self._netlink(_tree)
        wanted = f"mq/{value}" if kind == "mq" and children else value
        if handle != 0 and self._render(kind, children) != wanted:
            raise Unavailable(
                f"{self.iface} has a configured root qdisc ({kind} {handle >> 16:x}:); "
                "zerolayer replaces only the one the kernel attached",
                missing=False,
            )
        return wanted

    def write(self, value):
        async def work(ipr, index):
            if value.startswith("mq/"):
                await _replace(ipr, index, TC_H_ROOT, "mq")
                _, handle, children = await _tree(ipr, index)
                for queue in children:
                    await _replace(ipr, index, handle | queue, value[len("mq/"):])
            else:
                await _replace(ipr, index, TC_H_ROOT, value)

        self._netlink(work)

    def restore(self, original):
        try:
            self._netlink(_delete_root)
        except OSError as exc:
            # ENOENT: the root is the kernel's default already.
            if exc.errno != errno.ENOENT:
                raise

    def same(self, a, b):
        return a == b
