#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build zerolayer's container image with podman, from Debian packages only.
#
#   bash packaging/container/build.sh --wheels DIR [--tag TAG] [--suite SUITE]
#                                     [--mirror URI] [--output ARCHIVE]
#
# 1. The base: `debootstrap --variant=minbase SUITE` imported as
#    localhost/zerolayer-base:SUITE (kept in podman's store, built once).
# 2. The Containerfile beside this script, on that base, with DIR as wheels/
#    (zerolayer's wheel built on SUITE, and pyroute2's).
# 3. With --output, `podman save --format oci-archive` of the image, for
#    `podman load` on a machine with no registry.
# Run it as root (debootstrap).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WHEELS="" TAG="localhost/zerolayer:latest" SUITE=trixie OUTPUT=""
MIRROR="${ZEROLAYER_MIRROR:-http://deb.debian.org/debian}"
ZL_ME=container/build.sh
# shellcheck source=vagrant/vm/log.sh
. "$HERE/../../vagrant/vm/log.sh"
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) WHEELS="${2:?}"; shift 2 ;;
        --tag) TAG="${2:?}"; shift 2 ;;
        --suite) SUITE="${2:?}"; shift 2 ;;
        --mirror) MIRROR="${2:?}"; shift 2 ;;
        --output) OUTPUT="${2:?}"; shift 2 ;;
        *) die "usage: build.sh --wheels DIR [--tag TAG] [--suite SUITE] [--mirror URI] [--output ARCHIVE]" ;;
    esac
done
[ -n "$WHEELS" ] && compgen -G "$WHEELS/zerolayer-*.whl" >/dev/null || die "--wheels DIR must hold zerolayer's wheel"
need_root debootstrap
command -v podman >/dev/null || die "podman is missing (apt-get install podman)"

WORK="$(mktemp -d /tmp/zerolayer-container.XXXXXX)"
trap 'rm -rf --one-file-system "$WORK"' EXIT

BASE="localhost/zerolayer-base:$SUITE"
if ! podman image exists "$BASE"; then
    say "debootstrap $SUITE from $MIRROR"
    debootstrap --variant=minbase "$SUITE" "$WORK/root" "$MIRROR" >&2
    printf 'deb %s %s main\ndeb %s %s-updates main\n' "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" \
        >"$WORK/root/etc/apt/sources.list"
    tar -C "$WORK/root" --numeric-owner -cf - . | podman import --quiet - "$BASE" >/dev/null
    rm -rf --one-file-system "$WORK/root"
    say "imported $BASE"
fi

mkdir -p "$WORK/context/wheels"
cp "$WHEELS"/*.whl "$WORK/context/wheels/"
cp "$HERE/Containerfile" "$WORK/context/"
# --network host: apt in the RUN step reaches the Debian mirror as the host
# does. --isolation chroot: RUN steps need no OCI runtime, so no cgroup
# setup either (crun refuses a host with hybrid cgroups).
old="$(podman image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)"
podman build --quiet --network host --isolation chroot --build-arg "BASE=$BASE" -t "$TAG" "$WORK/context" >/dev/null
say "built $TAG"
# The image TAG named before, now nameless: remove it (unless a container uses it).
if [ -n "$old" ] && [ "$old" != "$(podman image inspect --format '{{.Id}}' "$TAG")" ]; then
    podman rmi "$old" >/dev/null 2>&1 || true
fi
if [ -n "$OUTPUT" ]; then
    rm -f "$OUTPUT"
    podman save --quiet --format oci-archive -o "$OUTPUT" "$TAG"
    say "saved $TAG to $OUTPUT"
fi
