#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build (once) and print the directory of a bootable Debian test image.
#
#   bash vagrant/vm/image.sh 5.10    Debian 11's kernel in a Debian 12 userspace
#   bash vagrant/vm/image.sh 6.1     Debian 12 (bookworm) with its stock kernel
#   bash vagrant/vm/image.sh 6.12    Debian 13 (trixie) with its stock kernel
#   bash vagrant/vm/image.sh 7.3     Debian 13 with trixie-backports' kernel
#   bash vagrant/vm/image.sh --key KERNEL   print the cache key's parts only
#
# The directory holds rootfs.ext4, vmlinuz, initrd.img and kernel-release.
# run.sh boots it with -snapshot, so the cached image is never modified.
# Everything the project needs (provision.sh's apt packages, kernel headers
# for bcc, the venv with the Python dependencies) is baked in, so provisioning
# inside the guest only has to pip-install the project itself.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
KEY_ONLY=""
if [ "${1:-}" = --key ]; then KEY_ONLY=1; shift; fi
KERNEL="${1:-}"
CACHE="${ZEROLAYER_VM_CACHE:-/var/cache/zerolayer/vm}"

say() { printf 'image.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
# SUITE: the userspace (bcc, Python, libxdp); KSUITE: where the kernel comes from.
case "$KERNEL" in
    5.10) SUITE=bookworm KSUITE=bullseye ;;
    6.1) SUITE=bookworm KSUITE=bookworm ;;
    6.12) SUITE=trixie KSUITE=trixie ;;
    7.3) SUITE=trixie KSUITE=trixie-backports ;;
    *) die "usage: image.sh [--key] 5.10|6.1|6.12|7.3" ;;
esac
[ -n "$KEY_ONLY" ] || [ "$(id -u)" -eq 0 ] || die "run me as root (debootstrap and chroot need it)"

# --- the mirror: whatever this host's apt already uses -------------------------
# deb822 first (Debian 12's default), then the one-line format. Prints the URIs
# of the sources serving exactly suite $1 (bookworm, bookworm-security).
mirror_uri() {
    local suite="$1" f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # Paragraphs are separated by blank lines; print URIs of the one whose
        # Suites lists the bare suite name.
        awk -v suite="$suite" '
            /^[[:space:]]*$/ { if (ok && uri != "") print uri; ok = 0; uri = ""; next }
            tolower($1) == "uris:" { uri = $2 }
            tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) ok = 1 }
            END { if (ok && uri != "") print uri }' "$f"
    done
    { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
        awk -v suite="$suite" '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; continue } else { if ($(i+1) == suite) print $i; break } }'
}
# A mirror serves every release at one URI, and the security archive every
# -security suite at another: the host's own (Debian 12 or 13) give them all.
# ZEROLAYER_VM_MIRROR / ZEROLAYER_VM_SECURITY override them (the tests use a
# fake file:// archive).
HOST_SUITE="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
# Not "| head -n 1": under pipefail its SIGPIPE would fail the pipeline.
MIRROR="${ZEROLAYER_VM_MIRROR:-$(mirror_uri "$HOST_SUITE")}"
MIRROR="${MIRROR%%$'\n'*}"
[ -n "$MIRROR" ] || die "found no '$HOST_SUITE' source in this host's apt configuration (set ZEROLAYER_VM_MIRROR to a Debian mirror)"
SECURITY="${ZEROLAYER_VM_SECURITY-$(mirror_uri "$HOST_SUITE-security")}"   # optional
SECURITY="${SECURITY%%$'\n'*}"

# --- what the image depends on ------------------------------------------------
# provision.sh owns the project's apt package list; read it from there rather
# than keep a second copy that would drift.
read -r -a PROJECT_PKGS <<<"$(sed -n 's/^PACKAGES=(\(.*\))$/\1/p' "$REPO/vagrant/provision.sh")"
[ ${#PROJECT_PKGS[@]} -gt 0 ] || die "found no PACKAGES=(...) line in vagrant/provision.sh"
# Its best-effort ones too (the bench's C consumer): the guest has no network,
# so what the image lacks, provision.sh cannot add there.
read -r -a BENCH_DEV_PKGS <<<"$(sed -n 's/^BENCH_DEV_PACKAGES=(\(.*\))$/\1/p' "$REPO/vagrant/provision.sh")"
EXTRA_PKGS=(initramfs-tools kmod util-linux iproute2 python3 python3-venv python3-bpfcc
            ca-certificates procps iputils-ping socat haproxy gcc libc6-dev tmux)
# Only the dependency lists of pyproject.toml matter: a change elsewhere in it
# (version, package data) must not cost a 15-minute rebuild.
PYDEPS="$(/usr/bin/python3 -c '
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(p["dependencies"] + ["[test]"] + p["optional-dependencies"]["test"]))
' "$REPO/pyproject.toml")"
INPUTS_HASH="$( { cat "${BASH_SOURCE[0]}" "$HERE/zl-init"; echo "${PROJECT_PKGS[*]} ${BENCH_DEV_PKGS[*]}";
                  echo "$PYDEPS"; echo "$KERNEL"; } | sha256sum | cut -d' ' -f1)"
# The other half of the key: the archive's current kernel in every suite the
# image's apt takes it from, so a Debian kernel update rebuilds the image.
# (The same suites the image's apt sources list below.)
case "$KSUITE" in
    *-backports) KEY_SOURCES=("$MIRROR" "$KSUITE") ;;
    bullseye) KEY_SOURCES=("$MIRROR" bullseye) ;;
    *) KEY_SOURCES=("$MIRROR" "$KSUITE" "$MIRROR" "$KSUITE-updates") ;;
esac
[ -z "$SECURITY" ] || [ "$KSUITE" != "${KSUITE%-backports}" ] || KEY_SOURCES+=("$SECURITY" "$KSUITE-security")
KINDEX_RC=0
KINDEX="$(/usr/bin/python3 "$HERE/kernel_index.py" "$CACHE/index" linux-image-amd64 "${KEY_SOURCES[@]}")" \
    || KINDEX_RC=$?
if [ -n "$KEY_ONLY" ]; then
    echo "rig $INPUTS_HASH"
    [ "$KINDEX_RC" -eq 0 ] && echo "$KINDEX"
    exit "$KINDEX_RC"
fi

OUT="$CACHE/$KERNEL"
mkdir -p "$CACHE"
# One build per kernel at a time: a second caller waits, then finds the cache.
exec 9>"$CACHE/.lock-$KERNEL"
flock 9
if [ -f "$OUT/inputs.sha256" ] && [ "$(cat "$OUT/inputs.sha256")" = "$INPUTS_HASH" ] \
   && [ -f "$OUT/rootfs.ext4" ] && [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initrd.img" ]; then
    if [ "$KINDEX_RC" -ne 0 ]; then
        say "cannot check the archive's kernel (see above): reusing the cached image for $KERNEL ($(cat "$OUT/kernel-release")), which may be out of date"
        echo "$OUT"
        exit 0
    fi
    if [ "$(cat "$OUT/kernel-index" 2>/dev/null)" = "$KINDEX" ]; then
        say "reusing cached image for $KERNEL ($(cat "$OUT/kernel-release"))"
        echo "$OUT"
        exit 0
    fi
    say "the archive's kernel changed since the cached image for $KERNEL was built: rebuilding"
fi
[ "$KINDEX_RC" -eq 0 ] || die "cannot check the archive's kernel and no image for $KERNEL is cached: is $MIRROR reachable?"

# --- host tools ---------------------------------------------------------------
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
if [ ${#need[@]} -gt 0 ]; then
    say "installing host tools: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi
say "building image for kernel $KERNEL: Debian $SUITE, kernel from $KSUITE, mirror $MIRROR"

# --- build area, cleaned on every exit path -----------------------------------
# Inside the cache dir, so the final rename is atomic (same filesystem).
WORK="$(mktemp -d "$CACHE/.build-$KERNEL.XXXXXX")"
chmod 755 "$WORK"   # mktemp's 0700 would outlive the rename
ROOT="$WORK/root"
MOUNTS=()
cleanup() {
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" 2>/dev/null || true
    done
    MOUNTS=()
    # Never delete through a mount that is still there (/dev is the host's).
    if findmnt -rn -o TARGET | grep -q "^$WORK/"; then
        say "left $WORK in place: something is still mounted under it"
    else
        rm -rf --one-file-system "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

T0=$SECONDS
phase_start=$SECONDS
phase() { say "phase $1 took $((SECONDS - phase_start)) s"; phase_start=$SECONDS; }

# --- debootstrap --------------------------------------------------------------
# minbase keeps it small; apt in the chroot brings the rest (it resolves
# dependencies far better than debootstrap's --include).
debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$ROOT" "$MIRROR" >&2 \
    || { tail -n 30 "$ROOT/debootstrap/debootstrap.log" >&2 2>/dev/null || true; die "debootstrap failed"; }
phase debootstrap

# --- chroot installs ----------------------------------------------------------
bind() { mount "$@"; MOUNTS+=("${@: -1}"); }
bind -t proc proc "$ROOT/proc"
bind -t sysfs sysfs "$ROOT/sys"
bind --bind /dev "$ROOT/dev"
bind --bind /dev/pts "$ROOT/dev/pts"
# A clean environment: the host's PIP_*, proxy and locale settings are not the
# guest's business.
inroot() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

# Services must not start inside the chroot (haproxy would try).
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod +x "$ROOT/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# Extra CAs this host trusts (e.g. an egress proxy's): without them apt over
# https and pip fail the same way inside the image as they would on the host.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
    inroot update-ca-certificates >/dev/null
fi
KTARGET=(-t "$KSUITE")
case "$KSUITE" in
    # No -t: it would rank the release above its own -security suite, and the
    # image would miss the kernel updates that the cache key follows.
    "$SUITE") KTARGET=() ;;
    "$SUITE-backports")
        echo "deb $MIRROR $KSUITE main" >"$ROOT/etc/apt/sources.list.d/backports.list" ;;
    bullseye)
        # An older release's kernel in this userspace. Pinned low, so a bullseye
        # package comes in only when bookworm has no package of that name: the
        # kernel's own packages, linux-kbuild-5.10, and gcc-10 with its runtime
        # libraries (the headers' linux-compiler-gcc-10-x86 wants it). Only the
        # two metapackages are pinned up, so an apt upgrade keeps 5.10. No -t:
        # a default release would outrank the low pin.
        {
            echo "deb $MIRROR bullseye main"
            [ -z "$SECURITY" ] || echo "deb $SECURITY bullseye-security main"
        } >"$ROOT/etc/apt/sources.list.d/bullseye.list"
        cat >"$ROOT/etc/apt/preferences.d/bullseye" <<'EOF'
Package: *
Pin: release n=bullseye
Pin-Priority: 100

Package: *
Pin: release n=bullseye-security
Pin-Priority: 100

Package: linux-image-amd64 linux-headers-amd64
Pin: release n=bullseye
Pin-Priority: 990

Package: linux-image-amd64 linux-headers-amd64
Pin: release n=bullseye-security
Pin-Priority: 990
EOF
        KTARGET=() ;;
esac
{
    echo "deb $MIRROR $SUITE-updates main"
    [ -z "$SECURITY" ] || echo "deb $SECURITY $SUITE-security main"
} >"$ROOT/etc/apt/sources.list.d/updates.list"
inroot apt-get update -q >&2
# The kernel and its headers from the same suite, so their versions match.
inroot apt-get install -y -q --no-install-recommends "${KTARGET[@]}" \
    linux-image-amd64 linux-headers-amd64 >&2
inroot apt-get install -y -q --no-install-recommends \
    "${EXTRA_PKGS[@]}" "${PROJECT_PKGS[@]}" >&2
[ ${#BENCH_DEV_PKGS[@]} -eq 0 ] || inroot apt-get install -y -q --no-install-recommends "${BENCH_DEV_PKGS[@]}" >&2 \
    || say "could not install ${BENCH_DEV_PKGS[*]}: the bench's C consumer is skipped in this image"
KREL="$(ls "$ROOT/lib/modules" | sort -V | tail -n 1)"
[ -f "$ROOT/boot/vmlinuz-$KREL" ] && [ -f "$ROOT/boot/initrd.img-$KREL" ] \
    || die "kernel $KREL or its initrd is missing in the image"
# The kernel the key names: the newest of its suites, else the key lies.
KVER="$(inroot dpkg-query -W -f='${Version}' linux-image-amd64)"
NEWEST="$(printf '%s\n' "$KINDEX" | awk '{ gsub(",", "\n", $3); print $3 }' | grep -v '^-$' | sort -V | tail -n 1)"
[ "$KVER" = "$NEWEST" ] || die "installed linux-image-amd64 $KVER, but the newest in the archive's index is $NEWEST"
# A backports kernel moves on (7.3 today): then the name here must follow.
case "$KREL" in "$KERNEL".*) ;; *) die "wanted kernel $KERNEL, got $KREL from $KSUITE: rename the kernel in image.sh, run.sh and matrix.sh" ;; esac
# bcc compiles against /lib/modules/<release>/build, and Debian splits the tree
# (kconfig.h lives under source). The headers package makes both links
# (absolute, so test them from inside); this only proves they resolve.
inroot test -e "/lib/modules/$KREL/build/Makefile" || die "/lib/modules/$KREL/build is not a headers tree"
inroot test -e "/lib/modules/$KREL/source/include/linux/kconfig.h" \
    || die "/lib/modules/$KREL/source is not a headers tree"
if [ "$KSUITE" = bullseye ]; then
    # For the build log: what bookworm could not have supplied. It should be
    # only the kernel's packages and gcc-10's. apt-cache policy lists the
    # suites the installed version (***) is in; some are in both, unchanged.
    from_old="$(inroot apt-cache policy $(inroot dpkg-query -W -f='${Package}\n') |
        awk 'function flush() { if (old && !cur) printf "%s ", pkg; old = cur = 0 }
             /^[^ ]/ { flush(); pkg = $1; sub(/:$/, "", pkg); inst = 0 }
             /^ \*\*\* / { inst = 1; next }
             /^     [^ ]/ { inst = 0 }
             inst && $3 ~ /^bullseye/ { old = 1 }
             inst && $3 ~ /^bookworm/ { cur = 1 }
             END { flush() }')"
    say "installed from bullseye: $from_old"
fi
inroot apt-get clean
phase "chroot installs"

# --- the venv, made as provision.sh makes it ---------------------------------
inroot /usr/bin/python3 -m venv --system-site-packages /opt/zerolayer/venv
# Installing the project pulls in exactly its dependencies (and the test
# extra); removing the project leaves them baked, so provisioning in the guest
# only builds the project. The copy leaves .git and build debris out.
mkdir -p "$ROOT/tmp/src"
tar -C "$REPO" --exclude=.git --exclude=build --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude=.pytest_cache --exclude=.hypothesis -cf - . |
    tar -C "$ROOT/tmp/src" -xf -
# setuptools and wheel too: provision.sh builds the project without build
# isolation, and the guest has no network to fetch them.
inroot /opt/zerolayer/venv/bin/pip install --quiet --disable-pip-version-check --no-cache-dir \
    'setuptools>=64' wheel '/tmp/src[test]' >&2
inroot /opt/zerolayer/venv/bin/pip uninstall --quiet --yes zerolayer >&2
inroot /opt/zerolayer/venv/bin/python -c 'import bcc, pyroute2, scapy, click, pytest' \
    || die "the venv cannot import the project's dependencies"
rm -rf "$ROOT/tmp/src"
phase venv

# --- guest settings -----------------------------------------------------------
install -m 0755 "$HERE/zl-init" "$ROOT/sbin/zl-init"
inroot passwd -d root >/dev/null          # console login, if ever needed, without a password
echo zl-vm >"$ROOT/etc/hostname"
rm -f "$ROOT/usr/sbin/policy-rc.d"
echo "$KREL" >"$WORK/kernel-release"
cp "$ROOT/boot/vmlinuz-$KREL" "$WORK/vmlinuz"
cp "$ROOT/boot/initrd.img-$KREL" "$WORK/initrd.img"

# Unmount before mkfs: the image must not contain the host's /dev or /proc.
for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount "${MOUNTS[i]}"; done
MOUNTS=()

# --- the ext4 -----------------------------------------------------------------
# mkfs.ext4 -d fills the filesystem from the tree: no loop device, no mount.
# 1.5 GB of headroom for the job (pip builds, test artefacts); the file is
# sparse, so the headroom costs no disk.
size_mb=$(( $(du -sm "$ROOT" | cut -f1) + 1536 ))
truncate -s "${size_mb}M" "$WORK/rootfs.ext4"
mkfs.ext4 -q -F -L zl-root -d "$ROOT" "$WORK/rootfs.ext4" >&2
rm -rf --one-file-system "$ROOT"
phase mkfs

# --- publish atomically -------------------------------------------------------
# The hash goes in last, and the directory appears by one rename: a killed
# build leaves only a .build-* directory, never a half image that looks valid.
echo "$KINDEX" >"$WORK/kernel-index"
echo "$INPUTS_HASH" >"$WORK/inputs.sha256"
OLD="$CACHE/.old-$KERNEL.$$"
[ -e "$OUT" ] && mv "$OUT" "$OLD"
mv "$WORK" "$OUT"
rm -rf "$OLD"
trap - EXIT
say "image for $KERNEL ($KREL) ready in $((SECONDS - T0)) s"
echo "$OUT"
