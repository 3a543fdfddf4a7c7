# SPDX-License-Identifier: Apache-2.0
"""The VM images' cache key follows the archive's kernel (vagrant/vm/image.sh).

A fake Debian archive (file://) stands in for the mirror: these tests change
the kernel package's version there and watch the key, and the cache check,
follow. Nothing is built."""

import lzma
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IMAGE_SH = REPO / "vagrant" / "vm" / "image.sh"


def publish(archive: Path, suite: str, version: str) -> None:
    """A Packages index for SUITE with linux-image-amd64 at VERSION (and a
    neighbour, so the parser must pick the right stanza)."""
    index = archive / "dists" / suite / "main" / "binary-amd64" / "Packages.xz"
    index.parent.mkdir(parents=True, exist_ok=True)
    text = (f"Package: linux-image-amd64-dbg\nVersion: 0.0-dbg\n\n"
            f"Package: linux-image-amd64\nSource: linux-signed-amd64\nVersion: {version}\n"
            f"Architecture: amd64\n\n")
    index.write_bytes(lzma.compress(text.encode()))


def image_sh(tmp_path: Path, *args: str, mirror: str) -> subprocess.CompletedProcess:
    # Stubs for the build's tools: a build that starts stops at once, in
    # debootstrap, and says so.
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for tool in ("debootstrap", "qemu-system-x86_64", "mkfs.ext4"):
        (stubs / tool).write_text("#!/bin/sh\necho stub $0 >&2\nexit 1\n")
        (stubs / tool).chmod(0o755)
    env = dict(os.environ, ZEROLAYER_VM_CACHE=str(tmp_path / "cache"),
               ZEROLAYER_VM_MIRROR=mirror, ZEROLAYER_VM_SECURITY="",
               PATH=f"{stubs}:{os.environ['PATH']}")
    return subprocess.run(["bash", str(IMAGE_SH), *args], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def archive(tmp_path):
    root = tmp_path / "archive"
    publish(root, "trixie-backports", "7.3.4-1~bpo13+1")
    return root


def test_a_kernel_update_in_the_archive_changes_the_key(tmp_path, archive):
    before = image_sh(tmp_path, "--key", "7.3", mirror=archive.as_uri())
    assert before.returncode == 0, before.stderr
    assert "trixie-backports linux-image-amd64 7.3.4-1~bpo13+1" in before.stdout.splitlines()
    publish(archive, "trixie-backports", "7.3.5-1~bpo13+1")
    after = image_sh(tmp_path, "--key", "7.3", mirror=archive.as_uri())
    assert after.returncode == 0, after.stderr
    assert after.stdout.splitlines()[0] == before.stdout.splitlines()[0]  # the rig's part
    assert after.stdout != before.stdout
    assert "trixie-backports linux-image-amd64 7.3.5-1~bpo13+1" in after.stdout.splitlines()


def test_every_suite_the_kernel_comes_from_is_in_the_key(tmp_path):
    root = tmp_path / "archive"
    publish(root, "trixie", "6.12.117-1")
    publish(root, "trixie-updates", "6.12.118-1")
    key = image_sh(tmp_path, "--key", "6.12", mirror=root.as_uri())
    assert key.returncode == 0, key.stderr
    assert key.stdout.splitlines()[1:] == ["trixie linux-image-amd64 6.12.117-1",
                                           "trixie-updates linux-image-amd64 6.12.118-1"]


def cached_image(tmp_path: Path, key: str) -> Path:
    """A cache entry as image.sh publishes one, for the key it printed."""
    out = tmp_path / "cache" / "7.3"
    out.mkdir(parents=True)
    for name in ("rootfs.ext4", "vmlinuz", "initrd.img"):
        (out / name).touch()
    rig, _, index = key.partition("\n")
    (out / "inputs.sha256").write_text(rig.removeprefix("rig ") + "\n")
    (out / "kernel-index").write_text(index)
    (out / "kernel-release").write_text("7.3.4+deb13-amd64\n")
    return out


@pytest.mark.root
def test_the_cached_image_is_reused_only_while_the_archive_kernel_is_the_same(tmp_path, archive):
    key = image_sh(tmp_path, "--key", "7.3", mirror=archive.as_uri())
    out = cached_image(tmp_path, key.stdout)
    reuse = image_sh(tmp_path, "7.3", mirror=archive.as_uri())
    assert reuse.returncode == 0, reuse.stderr
    assert reuse.stdout.strip() == str(out)
    assert "reusing cached image for 7.3 (7.3.4+deb13-amd64)" in reuse.stderr
    # Debian ships a new kernel: the same cache entry is now stale.
    publish(archive, "trixie-backports", "7.3.5-1~bpo13+1")
    rebuild = image_sh(tmp_path, "7.3", mirror=archive.as_uri())
    assert "the archive's kernel changed since the cached image for 7.3 was built" in rebuild.stderr
    assert "stub" in rebuild.stderr and rebuild.returncode == 1  # the build began
    assert (out / "kernel-index").read_text().strip().endswith("7.3.4-1~bpo13+1")  # kept until replaced


@pytest.mark.root
def test_an_unreachable_mirror_reuses_the_cached_image_and_says_so(tmp_path, archive):
    cached_image(tmp_path, image_sh(tmp_path, "--key", "7.3", mirror=archive.as_uri()).stdout)
    gone = (tmp_path / "no-such-mirror").as_uri()
    reuse = image_sh(tmp_path, "7.3", mirror=gone)
    assert reuse.returncode == 0, reuse.stderr
    assert "cannot read the trixie-backports index" in reuse.stderr
    assert "reusing the cached image for 7.3 (7.3.4+deb13-amd64), which may be out of date" in reuse.stderr


@pytest.mark.root
def test_an_unreachable_mirror_without_a_cached_image_fails_before_building(tmp_path):
    gone = (tmp_path / "no-such-mirror").as_uri()
    build = image_sh(tmp_path, "7.3", mirror=gone)
    assert build.returncode == 1
    assert "cannot read the trixie-backports index" in build.stderr
    assert "no image for 7.3 is cached: is file://" in build.stderr
    assert "building image" not in build.stderr
