#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build (once) and print the directory of the service suite's image: the
# rig's Debian 13 image (vagrant/vm/image.sh 6.12) with systemd as PID 1,
# podman 5.4, zerolayer installed from a wheel, its units (packaging/
# install.sh) and its container image as an archive. Two cached layers, under
# ${ZEROLAYER_VM_CACHE:-/var/cache/zerolayer/vm}/service-6.12/:
#   system/  the rig's image + systemd, podman; keyed on the rig image's own
#            key, this script and zl-job*
#   ./       system/ + zerolayer (wheel, units, container image); keyed on
#            system/'s key and the files that go into the wheel and image
# The directory holds rootfs.ext4, vmlinuz, initrd.img and kernel-release, as
# the rig's does. Run it as root. --key prints the two keys only.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ZL_ME=vagrant/vm/service/image.sh
# shellcheck source=vagrant/vm/lib.sh
. "$HERE/../lib.sh"
# The rig's kernel whose Debian 13 userspace the service runs in.
KERNEL=6.12
OUT="$ZL_CACHE/service-$KERNEL"
SYSTEM_PKGS=(systemd-sysv udev dbus podman crun conmon netavark aardvark-dns catatonit)
KEY_ONLY=""
if [ "${1:-}" = --key ]; then
    KEY_ONLY=1 RIG="$ZL_CACHE/$KERNEL"   # as cached: no build
else
    need_root "chroot and loop mounts need it"
    # The host builds the container image (packaging/container/build.sh) with
    # its own podman; a fresh machine lacks it.
    need_tools podman:podman,crun,netavark,aardvark-dns,uidmap
    RIG="$(bash "$ZL_VM/image.sh" "$KERNEL")"
fi
# The library's image helpers as bash sees them: an edit elsewhere in it
# does not rebuild system/.
SYSTEM_KEY="$( { cat "$RIG/inputs.sha256" "$RIG/kernel-index" "${BASH_SOURCE[0]}" \
                 "$HERE/zl-job" "$HERE/zl-job.service"; image_helpers; } | sha256sum | cut -d' ' -f1)"
# What the wheel and the container image are made of (pyxdp/bpf and
# pyxdp/tuning are symlinks: -h follows them).
tree_tar() {
    tar -C "$ZL_REPO" -h --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        --exclude=__pycache__ --exclude='*.pyc' -cf - \
        pyxdp pyproject.toml setup.py README.md LICENSE LICENSES packaging
}
TREE_KEY="$( { echo "$SYSTEM_KEY"; tree_tar | sha256sum; } | sha256sum | cut -d' ' -f1)"
if [ -n "$KEY_ONLY" ]; then printf 'system %s\ntree %s\n' "$SYSTEM_KEY" "$TREE_KEY"; exit 0; fi

mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9
if [ "$(cat "$OUT/key" 2>/dev/null)" = "$TREE_KEY" ] && [ -f "$OUT/rootfs.ext4" ]; then
    say "reusing cached image $OUT"
    echo "$OUT"
    exit 0
fi

WORK="$(mktemp -d "$OUT/.build.XXXXXX")"
MNT="$WORK/mnt"
work_area "$WORK"
ZL_PHASE=$SECONDS
open_root() { # IMAGE: loop-mount it on $MNT with what a chroot needs
    mkdir -p "$MNT"
    mount_at -o loop "$1" "$MNT"
    chroot_mounts "$MNT"
    mount_at -t tmpfs tmpfs "$MNT/run"
    mount_at -t tmpfs tmpfs "$MNT/tmp"
}

# --- system/: systemd and podman on the rig's image -----------------------------
if [ "$(cat "$OUT/system/key" 2>/dev/null)" != "$SYSTEM_KEY" ] || [ ! -f "$OUT/system/rootfs.ext4" ]; then
    say "building system/ from $RIG"
    cp --sparse=always "$RIG/rootfs.ext4" "$WORK/system.ext4"
    # Room for podman's store: the container image, loaded, and its archive.
    truncate -s +4G "$WORK/system.ext4"
    e2fsck -fy "$WORK/system.ext4" >/dev/null || [ $? -le 1 ]
    resize2fs -f "$WORK/system.ext4" >/dev/null 2>&1
    open_root "$WORK/system.ext4"
    services_off
    inroot apt-get update -q >&2
    inroot apt-get install -y -q --no-install-recommends "${SYSTEM_PKGS[@]}" >&2
    inroot apt-get clean
    services_on
    # A short TCG boot: nothing starts that the suite does not need.
    inroot systemctl mask haproxy.service apt-daily.timer apt-daily-upgrade.timer \
        e2scrub_all.timer e2scrub_reap.service fstrim.timer dpkg-db-backup.timer \
        man-db.timer systemd-timesyncd.service getty@tty1.service >/dev/null 2>&1
    install -m 0755 "$HERE/zl-job" "$MNT/usr/local/sbin/zl-job"
    install -m 0644 "$HERE/zl-job.service" "$MNT/etc/systemd/system/zl-job.service"
    inroot systemctl enable zl-job.service >/dev/null 2>&1
    # The journal survives the reboot: the second boot's tests read the first's.
    mkdir -p "$MNT/var/log/journal"
    unmount_all
    mkdir -p "$OUT/system"
    mv "$WORK/system.ext4" "$OUT/system/rootfs.ext4"
    echo "$SYSTEM_KEY" >"$OUT/system/key"
    phase system
fi

# --- ./: zerolayer, its units and its container image ---------------------------
cp --sparse=always "$OUT/system/rootfs.ext4" "$WORK/rootfs.ext4"
open_root "$WORK/rootfs.ext4"
mkdir -p "$MNT/tmp/src" "$WORK/wheels"
tree_tar | tar -C "$MNT/tmp/src" -xf -
# The wheel is built here, by Debian 13's Python (the compiled AF_XDP core
# is built for it); the image's venv already holds the dependencies.
inroot /opt/zerolayer/venv/bin/pip wheel --quiet --no-deps --no-build-isolation \
    --disable-pip-version-check -w /tmp/wheels /tmp/src >&2
inroot /opt/zerolayer/venv/bin/pip install --quiet --no-deps --no-index \
    --disable-pip-version-check --force-reinstall "/tmp/wheels/$(cd "$MNT/tmp/wheels" && echo zerolayer-*.whl)" >&2
ln -sfn /opt/zerolayer/venv/bin/zerolayer "$MNT/usr/local/bin/zerolayer"
# The units' commands load the objects built here; none compiles.
inroot /opt/zerolayer/venv/bin/zerolayer build >&2
inroot bash /tmp/src/packaging/install.sh >&2
# pyroute2's wheel for the container (Debian 13 has 0.7): the version the
# venv runs.
PYROUTE2="$(inroot /opt/zerolayer/venv/bin/python -c 'import importlib.metadata as m; print(m.version("pyroute2"))')"
inroot /opt/zerolayer/venv/bin/pip download --quiet --no-deps --only-binary=:all: \
    --disable-pip-version-check -d /tmp/wheels "pyroute2==$PYROUTE2" >&2
# OpenTelemetry's SDK and OTLP exporter (the otlp extra: `exporter --otlp`),
# with what they need, at the versions the venv runs; Debian's own packages
# serve where they are new enough.
OTEL="$(inroot /opt/zerolayer/venv/bin/python -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http")))')"
# shellcheck disable=SC2086 # two requirements, split on purpose
inroot /opt/zerolayer/venv/bin/pip download --quiet --only-binary=:all: \
    --disable-pip-version-check -d /tmp/wheels $OTEL >&2
cp "$MNT"/tmp/wheels/*.whl "$WORK/wheels/"
phase zerolayer
bash "$ZL_REPO/packaging/container/build.sh" --wheels "$WORK/wheels" --output "$WORK/zerolayer-image.tar"
phase "container image"
# Loaded here, into the image's store, so the guest does not spend TCG time on it.
mkdir -p "$MNT/var/lib/zerolayer-vm"
cp "$WORK/zerolayer-image.tar" "$MNT/var/lib/zerolayer-vm/"
inroot podman load --quiet -i /var/lib/zerolayer-vm/zerolayer-image.tar >&2
unmount_all
phase "image load"

RIG_KREL="$(cat "$RIG/kernel-release")"
cp "$RIG/vmlinuz" "$RIG/initrd.img" "$WORK/"
echo "$RIG_KREL" >"$WORK/kernel-release"
for f in rootfs.ext4 vmlinuz initrd.img kernel-release; do mv "$WORK/$f" "$OUT/$f"; done
echo "$TREE_KEY" >"$OUT/key"
say "image ready: $OUT"
echo "$OUT"
