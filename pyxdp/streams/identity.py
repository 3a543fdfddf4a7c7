# SPDX-License-Identifier: Apache-2.0
"""Who a stream belongs to, found on the node (docs/spec.md §11.5): the
systemd unit, container and pod that a process's cgroup path names, and its
executable's name. No API server, no container runtime is asked: what the
path does not name (a container's name) is not known.

The names come from other users (a unit's or executable's name, a cgroup a
user made), so each is cut to a bound and escaped before it is kept.
"""

import os
import re
from dataclasses import dataclass

from pyxdp.human import escaped

_NAME_MAX = 64
# A container's cgroup, as runtimes name it: systemd's driver
# (docker-ID.scope, cri-containerd-ID.scope, crio-ID.scope, libpod-ID.scope)
# or cgroupfs's (a directory named by the bare id).
_CONTAINER = re.compile(r"^(?:(?:docker|cri-containerd|crio|libpod)-)?([0-9a-f]{64})(?:\.scope)?$")
# A pod's: kubepods-burstable-pod1a2b_....slice (systemd driver, dashes as
# underscores) or pod1a2b-... (cgroupfs driver).
_POD = re.compile(r"^(?:kubepods(?:-[a-z]+)*-)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}"
                  r"[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$")
_UNIT = re.compile(r"^(.+)\.service$")


@dataclass(frozen=True)
class Identity:
    """OpenTelemetry's resource attributes of a process, as far as the node
    knows them. service is the systemd unit (without .service), else the
    executable's name."""

    service: str
    executable: str | None = None
    container_id: str | None = None
    pod_uid: str | None = None

    def attributes(self) -> dict[str, str]:
        """As OpenTelemetry's resource attributes."""
        out = {"service.name": self.service}
        if self.executable:
            out["process.executable.name"] = self.executable
        if self.container_id:
            out["container.id"] = self.container_id
        if self.pod_uid:
            out["k8s.pod.uid"] = self.pod_uid
        return out

    def fields(self) -> dict[str, str | None]:
        """As `streams --json` fields."""
        return {"service": self.service, "executable": self.executable,
                "container_id": self.container_id, "k8s_pod_uid": self.pod_uid}


UNKNOWN = Identity("unknown")


def _bounded(name: str | None) -> str | None:
    if not name:
        return None
    return escaped(name[:_NAME_MAX]) or None


def from_cgroup(path: str, executable: str | None) -> Identity:
    """The identity a cgroup PATH (as /proc/PID/cgroup gives it) and an
    EXECUTABLE's name make. The innermost unit names the service: a
    process in user@1000.service/app.slice/api.service is api's."""
    unit = container = pod = None
    for part in path.split("/"):
        m = _CONTAINER.match(part)
        if m:
            container = m.group(1)
            continue
        m = _POD.match(part)
        if m:
            pod = m.group(1).replace("_", "-")
            continue
        m = _UNIT.match(part)
        if m and not part.startswith("user@"):
            unit = m.group(1)
    exe = _bounded(executable)
    return Identity(_bounded(unit) or exe or "unknown", exe, container, pod)


def cgroup_path(pid: int) -> str | None:
    """PID's cgroup in the unified hierarchy (the "0::" line), else in
    systemd's own (name=systemd, a hybrid host's v1 tree); None if gone."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            lines = f.read(65536).splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":
            return path
        if controllers == "name=systemd":
            found = path
    return found


def of_process(pid: int) -> Identity:
    """PID's identity, read now (a process that is gone: UNKNOWN). The
    executable's name is its link's last part: nothing is opened."""
    path = cgroup_path(pid)
    try:
        exe: str | None = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        if exe and exe.endswith(" (deleted)"):
            exe = exe[: -len(" (deleted)")]
    except OSError:
        exe = None
    if path is None and exe is None:
        return UNKNOWN
    return from_cgroup(path or "", exe)


class Identities:
    """Each process's identity, read once (at its first connection) and
    forgotten when it exits. At most MAX processes are remembered."""

    MAX = 65536

    def __init__(self, read=of_process) -> None:
        self._read = read
        self._by_pid: dict[int, Identity] = {}

    def of(self, pid: int) -> Identity:
        found = self._by_pid.get(pid)
        if found is None:
            found = self._read(pid)
            if len(self._by_pid) >= self.MAX:
                del self._by_pid[next(iter(self._by_pid))]
            self._by_pid[pid] = found
        return found

    def exited(self, pid: int) -> None:
        self._by_pid.pop(pid, None)
