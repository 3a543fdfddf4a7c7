# SPDX-License-Identifier: Apache-2.0
"""Where the knobs are: /proc and /sys as seen from the namespace being tuned.

Three ways to see a host:
- the host itself: /proc and /sys;
- a named network namespace: this thread setns()es into it, so /proc/sys/net
  shows the namespace's sysctls, and a private sysfs mount shows its devices
  (see netns_sysfs);
- a fake root: a directory holding copies of proc/ and sys/, for tests. Files
  only: nothing is asked of netlink, and outside the directory only the
  kernel release and boot id are read.
"""

import contextlib
import os
from dataclasses import dataclass

from pyxdp.errors import ZerolayerError
from pyxdp.kernel import netns
from pyxdp.tuning import netns_sysfs


@dataclass
class Host:
    proc: str
    sys: str | None  # None when the namespace's sysfs could not be mounted
    netns: str | None = None
    netns_inode: int | None = None
    root: str | None = None  # set for a fake root
    sys_error: str | None = None  # why `sys` is None

    @property
    def fake(self) -> bool:
        return self.root is not None

    @property
    def where(self) -> str:
        if self.fake:
            return f"fake root {self.root}"
        return f"netns {self.netns}" if self.netns else "the host"

    def sysctl_path(self, name: str) -> str:
        # sysctl(8) spells a dot inside one path component (eth0.100) as '/'.
        parts = [part.replace("/", ".") for part in name.split(".")]
        return os.path.join(self.proc, "sys", *parts)

    def sys_path(self, *parts: str) -> str:
        if self.sys is None:
            raise OSError(
                2, f"no sysfs for {self.where}: {self.sys_error or 'not mounted'}"
            )
        return os.path.join(self.sys, *parts)

    def has_interface(self, name: str) -> bool:
        return os.path.isdir(self.sys_path("class", "net", name))


@contextlib.contextmanager
def opened(netns_name: str | None = None, root: str | None = None):
    """Yield the Host to tune; with a netns, the calling thread is inside it."""
    if root is not None:
        if netns_name is not None:
            raise ZerolayerError(
                "--root and --netns do not go together: a fake root has no namespaces"
            )
        root = os.path.abspath(root)
        if not os.path.isdir(os.path.join(root, "proc", "sys")):
            raise ZerolayerError(f"--root {root}: no proc/sys directory under it")
        yield Host(proc=os.path.join(root, "proc"), sys=os.path.join(root, "sys"),
                   root=root)
        return
    if netns_name is None:
        yield Host(proc="/proc", sys="/sys")
        return
    with netns.entered(netns_name):
        inode = os.stat(netns.path(netns_name)).st_ino
        try:
            sysfs_fd = netns_sysfs.mount()
        except OSError as exc:
            yield Host(proc="/proc", sys=None, netns=netns_name, netns_inode=inode,
                       sys_error=str(exc))
            return
        try:
            yield Host(proc="/proc", sys=f"/proc/self/fd/{sysfs_fd}",
                       netns=netns_name, netns_inode=inode)
        finally:
            os.close(sysfs_fd)
