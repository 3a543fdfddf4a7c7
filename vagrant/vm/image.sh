#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build (once) and print the directory of a bootable Debian test image.
#
#   bash vagrant/vm/image.sh KERNEL         build or reuse; print the directory
#   bash vagrant/vm/image.sh --key KERNEL   print the cache key's parts only
#
# KERNEL is a name in vagrant/vm/kernels, which says which Debian userspace
# and which suite's kernel the image gets.
# The directory holds rootfs.ext4, vmlinuz, initrd.img and kernel-release.
# run.sh boots it with -snapshot, so the cached image is never modified.
# Everything the project needs (provision.sh's apt packages, the venv with
# the Python dependencies) is baked in, so provisioning
# inside the guest only has to pip-install the project itself.
set -euo pipefail
# shellcheck source=vagrant/vm/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ZL_USAGE="image.sh [--key] $(kernel_names | paste -sd'|')"

KEY_ONLY=""
if [ "${1:-}" = --key ]; then KEY_ONLY=1; shift; fi
KERNEL="${1:-}"
[ -n "$KERNEL" ] || usage
kernel_row "$KERNEL" || usage
# SUITE: the userspace (Python, clang, libbpf, libxdp); KSUITE: where the kernel comes from.
SUITE="$KERNEL_SUITE" KSUITE="$KERNEL_KSUITE"
[ -n "$KEY_ONLY" ] || need_root "debootstrap and chroot need it"

# --- the mirror: whatever this host's apt already uses -------------------------
# deb822 first (Debian 12's default), then the one-line format. Prints the URIs
# of the sources serving exactly suite $1 (a release, or its -security).
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
read -r -a PROJECT_PKGS <<<"$(sed -n 's/^PACKAGES=(\(.*\))$/\1/p' "$ZL_REPO/vagrant/provision.sh")"
[ ${#PROJECT_PKGS[@]} -gt 0 ] || die "found no PACKAGES=(...) line in vagrant/provision.sh"
# Its best-effort ones too (the bench's C consumer): the guest has no network,
# so what the image lacks, provision.sh cannot add there.
read -r -a BENCH_DEV_PKGS <<<"$(sed -n 's/^BENCH_DEV_PACKAGES=(\(.*\))$/\1/p' "$ZL_REPO/vagrant/provision.sh")"
EXTRA_PKGS=(initramfs-tools kmod util-linux iproute2 python3 python3-venv
            ca-certificates procps iputils-ping socat haproxy gcc libc6-dev tmux)
# Only the dependency lists of pyproject.toml matter: a change elsewhere in it
# (version, package data) must not cost a 15-minute rebuild.
PYDEPS="$(/usr/bin/python3 -c '
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(p["dependencies"] + ["[test]"] + p["optional-dependencies"]["test"]))
' "$ZL_REPO/pyproject.toml")"
# The library's image helpers as bash sees them, and the kernel's line of
# vagrant/vm/kernels but its "where" (moving a kernel out of CI rebuilds
# nothing).
INPUTS_HASH="$( { cat "${BASH_SOURCE[0]}" "$ZL_VM/zl-init"; image_helpers;
                  echo "${PROJECT_PKGS[*]} ${BENCH_DEV_PKGS[*]}";
                  echo "$PYDEPS"; echo "$KERNEL $SUITE $KSUITE"; } | sha256sum | cut -d' ' -f1)"
# The other half of the key: the archive's current kernel in every suite the
# image's apt takes it from, so a Debian kernel update rebuilds the image.
# (The same suites the image's apt sources list below.)
# The userspace's own release brings its -updates; backports and an older
# release (whose -updates the image does not list) do not.
case "$KSUITE" in
    "$SUITE") KEY_SOURCES=("$MIRROR" "$KSUITE" "$MIRROR" "$KSUITE-updates") ;;
    *) KEY_SOURCES=("$MIRROR" "$KSUITE") ;;
esac
[ -z "$SECURITY" ] || [ "$KSUITE" != "${KSUITE%-backports}" ] || KEY_SOURCES+=("$SECURITY" "$KSUITE-security")
KINDEX_RC=0
KINDEX="$(/usr/bin/python3 "$ZL_VM/kernel_index.py" "$ZL_CACHE/index" linux-image-amd64 "${KEY_SOURCES[@]}")" \
    || KINDEX_RC=$?
if [ -n "$KEY_ONLY" ]; then
    echo "rig $INPUTS_HASH"
    [ "$KINDEX_RC" -eq 0 ] && echo "$KINDEX"
    exit "$KINDEX_RC"
fi

OUT="$ZL_CACHE/$KERNEL"
mkdir -p "$ZL_CACHE"
# One build per kernel at a time: a second caller waits, then finds the cache.
exec 9>"$ZL_CACHE/.lock-$KERNEL"
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
need_tools debootstrap:debootstrap qemu-system-x86_64:qemu-system-x86 mkfs.ext4:e2fsprogs
say "building image for kernel $KERNEL: Debian $SUITE, kernel from $KSUITE, mirror $MIRROR"

# --- build area, cleaned on every exit path -----------------------------------
# Inside the cache dir, so the final rename is atomic (same filesystem).
WORK="$(mktemp -d "$ZL_CACHE/.build-$KERNEL.XXXXXX")"
chmod 755 "$WORK"   # mktemp's 0700 would outlive the rename
ROOT="$WORK/root"
work_area "$WORK"

T0=$SECONDS
ZL_PHASE=$SECONDS

# --- debootstrap --------------------------------------------------------------
# minbase keeps it small; apt in the chroot brings the rest (it resolves
# dependencies far better than debootstrap's --include).
debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$ROOT" "$MIRROR" >&2 \
    || { tail -n 30 "$ROOT/debootstrap/debootstrap.log" >&2 2>/dev/null || true; die "debootstrap failed"; }
phase debootstrap

# --- chroot installs ----------------------------------------------------------
chroot_mounts "$ROOT"
services_off
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
    *)
        # An older release's kernel in this userspace. Pinned low, so an old
        # package comes in only when the userspace's release has no package
        # of that name: the kernel's own packages. Only its metapackage is
        # pinned up, so an apt upgrade keeps the kernel. No -t: a default release would outrank
        # the low pin.
        {
            echo "deb $MIRROR $KSUITE main"
            [ -z "$SECURITY" ] || echo "deb $SECURITY $KSUITE-security main"
        } >"$ROOT/etc/apt/sources.list.d/$KSUITE.list"
        for suite in "$KSUITE" "$KSUITE-security"; do
            printf 'Package: *\nPin: release n=%s\nPin-Priority: 100\n\n' "$suite"
            printf 'Package: linux-image-amd64\nPin: release n=%s\nPin-Priority: 990\n\n' "$suite"
        done >"$ROOT/etc/apt/preferences.d/$KSUITE"
        KTARGET=() ;;
esac
{
    echo "deb $MIRROR $SUITE-updates main"
    [ -z "$SECURITY" ] || echo "deb $SECURITY $SUITE-security main"
} >"$ROOT/etc/apt/sources.list.d/updates.list"
inroot apt-get update -q >&2
# The kernel alone: the programs are CO-RE objects, fitted to its BTF as
# they load, so no headers tree is needed.
inroot apt-get install -y -q --no-install-recommends "${KTARGET[@]}" linux-image-amd64 >&2
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
# A backports kernel moves on: then its name in vagrant/vm/kernels must follow.
case "$KREL" in "$KERNEL".*) ;; *) die "wanted kernel $KERNEL, got $KREL from $KSUITE: rename the kernel in vagrant/vm/kernels" ;; esac
case "$KSUITE" in "$SUITE"|"$SUITE-backports") ;; *)
    # For the build log: what the userspace's release could not have supplied. It should be
    # only the kernel's packages. apt-cache policy lists the
    # suites the installed version (***) is in; some are in both, unchanged.
    mapfile -t installed < <(inroot dpkg-query -W -f='${Package}\n')
    from_old="$(inroot apt-cache policy "${installed[@]}" |
        awk -v old_suite="$KSUITE" -v cur_suite="$SUITE" '
             function flush() { if (old && !cur) printf "%s ", pkg; old = cur = 0 }
             /^[^ ]/ { flush(); pkg = $1; sub(/:$/, "", pkg); inst = 0 }
             /^ \*\*\* / { inst = 1; next }
             /^     [^ ]/ { inst = 0 }
             inst && index($3, old_suite) == 1 { old = 1 }
             inst && index($3, cur_suite) == 1 { cur = 1 }
             END { flush() }')"
    say "installed from $KSUITE: $from_old" ;;
esac
inroot apt-get clean
phase "chroot installs"

# --- the venv, made as provision.sh makes it ---------------------------------
inroot /usr/bin/python3 -m venv --system-site-packages /opt/zerolayer/venv
# Installing the project pulls in exactly its dependencies (and the test
# extra); removing the project leaves them baked, so provisioning in the guest
# only builds the project. The copy leaves .git and build debris out.
mkdir -p "$ROOT/tmp/src"
tar -C "$ZL_REPO" --exclude=.git --exclude=build --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude=.pytest_cache --exclude=.hypothesis -cf - . |
    tar -C "$ROOT/tmp/src" -xf -
# setuptools and wheel too: provision.sh builds the project without build
# isolation, and the guest has no network to fetch them.
inroot /opt/zerolayer/venv/bin/pip install --quiet --disable-pip-version-check --no-cache-dir \
    'setuptools>=64' wheel '/tmp/src[test]' >&2
# The BPF objects, built here at the host's speed by the image's own clang,
# into the cache the guest's commands read (keyed by the sources: a guest
# given other sources builds those once, as it provisions).
inroot /opt/zerolayer/venv/bin/zerolayer build >&2
inroot /opt/zerolayer/venv/bin/pip uninstall --quiet --yes zerolayer >&2
inroot /opt/zerolayer/venv/bin/python -c 'import pyroute2, scapy, click, pytest' \
    || die "the venv cannot import the project's dependencies"
rm -rf "$ROOT/tmp/src"
phase venv

# --- guest settings -----------------------------------------------------------
install -m 0755 "$ZL_VM/zl-init" "$ROOT/sbin/zl-init"
inroot passwd -d root >/dev/null          # console login, if ever needed, without a password
echo zl-vm >"$ROOT/etc/hostname"
services_on
echo "$KREL" >"$WORK/kernel-release"
cp "$ROOT/boot/vmlinuz-$KREL" "$WORK/vmlinuz"
cp "$ROOT/boot/initrd.img-$KREL" "$WORK/initrd.img"

# Unmount before mkfs: the image must not contain the host's /dev or /proc.
unmount_all

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
OLD="$ZL_CACHE/.old-$KERNEL.$$"
[ -e "$OUT" ] && mv "$OUT" "$OLD"
mv "$WORK" "$OUT"
rm -rf "$OLD"
say "image for $KERNEL ($KREL) ready in $((SECONDS - T0)) s"
echo "$OUT"
