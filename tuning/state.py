# SPDX-License-Identifier: Apache-2.0
"""The state file: what each knob held before zerolayer first changed it.

One JSON file per namespace (`host.json`, `netns-NAME.json`) in the state
directory, /run/zerolayer/tune by default: /run is emptied at boot, which is
also when the kernel forgets the tuning (tuned keeps its own under /run too).

- It holds the *first* snapshot: a second run adds knobs it had not seen, but
  never replaces an original value.
- It is written before each knob is (write-ahead), and atomically (temporary
  file, fsync, rename, fsync of the directory). A crash at any moment leaves
  either the old file or the new one, and the file names every knob that may
  have changed. A temporary file left by a crash is removed on the next run.
- It records the boot and the namespace it describes. After a reboot, or for
  a namespace deleted and created again under the same name, it is stale.
- Runs take a lock on the directory, so two never interleave.
- What it says is written back to the kernel by --revert, so the directory
  and the file are refused unless only root (or the invoking user) can
  change them (pyxdp.trusted_file), and the temporary file is made anew,
  never opened through a link.
"""

import contextlib
import errno
import fcntl
import glob
import json
import os

from pyxdp import trusted_file
from pyxdp.errors import ZerolayerError
from pyxdp.tuning.host import Host

DEFAULT_DIR = "/run/zerolayer/tune"
VERSION = 1
MAX_BYTES = 16 << 20  # a knob is ~200 bytes: room for every IRQ of a large host


def default_dir(root: str | None) -> str:
    """A fake root keeps its state inside itself, never beside the real one."""
    if root is not None:
        return os.path.join(os.path.abspath(root), DEFAULT_DIR.lstrip("/"))
    return DEFAULT_DIR


def _boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


class Store:
    def __init__(self, directory: str, host: Host):
        self.directory = directory
        name = f"netns-{host.netns}" if host.netns else "host"
        self.path = os.path.join(directory, f"{name}.json")
        self.identity = {
            "boot_id": _boot_id(),
            "netns": host.netns,
            "netns_inode": host.netns_inode,
        }

    @contextlib.contextmanager
    def locked(self, create: bool = True):
        """Hold the directory's lock. Without CREATE, a missing directory means
        there is no state to protect, and it is not made just to be locked."""
        if not create and not os.path.isdir(self.directory):
            yield
            return
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            trusted_file.check_directory(self.directory, "state directory")
            fd = os.open(self.directory,
                         os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise ZerolayerError(
                f"cannot use state directory {self.directory}: {exc.strerror}"
            ) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ZerolayerError(
                    f"another `zerolayer tune` is running (it holds {self.directory}); "
                    "wait for it to finish"
                ) from None
            for leftover in glob.glob(glob.escape(self.path) + ".tmp.*"):
                os.unlink(leftover)  # from a run that crashed while saving
            yield
        finally:
            os.close(fd)

    def new(self) -> dict:
        return {"version": VERSION, **self.identity, "profiles": [], "knobs": []}

    def load(self) -> dict | None:
        if not os.path.lexists(self.path):
            return None
        raw = trusted_file.read(self.path, "state file", MAX_BYTES)
        try:
            data = json.loads(raw)
            if data.get("version") != VERSION or not isinstance(data.get("knobs"), list):
                raise ValueError(f"not a version {VERSION} zerolayer state file")
        except (ValueError, AttributeError, RecursionError) as exc:
            raise ZerolayerError(
                f"state file {self.path} is damaged ({exc}); zerolayer writes it "
                "atomically, so something else changed it: read it, restore by hand, "
                "then remove it"
            ) from None
        return data

    def stale(self, data: dict) -> str | None:
        """Why DATA does not describe this boot and namespace, or None."""
        if data.get("boot_id") != self.identity["boot_id"]:
            return "an earlier boot"
        if data.get("netns_inode") != self.identity["netns_inode"]:
            return "an earlier namespace of the same name"
        return None

    def save(self, data: dict) -> None:
        temp = f"{self.path}.tmp.{os.getpid()}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.rename(temp, self.path)
        self._sync_directory()

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
        self._sync_directory()

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
