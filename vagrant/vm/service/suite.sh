#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The service suite: zerolayer under systemd (and podman kube play) in a
# Debian 13 VM with systemd as PID 1, booted twice from one disk.
#
#   bash vagrant/vm/service/suite.sh [--timeout SECONDS]
#
# image.sh builds (once) the image; the disk is a qcow2 overlay on it, kept
# between the two boots and removed at the end (lib.sh's boot --overlay),
# so the cached image is never written. Boot 1 runs `guest.sh 1`, boot 2
# `guest.sh 2` (what each proves is at the top of guest.sh). The guest has
# two virtio NICs, eth0 and eth1, on one internal qemu hub and no other
# network. Prints each phase's time; exits 0 when both boots passed (1: a
# check failed; 123: the guest kernel crashed; 124: a boot timed out; 125: a
# boot reported no status; the logs stay in /tmp/zerolayer-vm-logs/service-*).
# The accelerator as for run.sh (lib.sh's boot). Run it as root.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ZL_ME=vagrant/vm/service/suite.sh
ZL_USAGE="suite.sh [--timeout SECONDS]"
# shellcheck source=vagrant/vm/lib.sh
. "$HERE/../lib.sh"

TIMEOUT=1200
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) TIMEOUT="${2:?}"; shift 2 ;;
        *) usage ;;
    esac
done
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || usage
need_root
START=$SECONDS

IMAGE="$(bash "$HERE/image.sh")"
say "image ready after $((SECONDS - START)) s: $IMAGE"

boot_setup service
# What the guest runs and reads: the job share, never the repository.
cp "$HERE/guest.sh" "$ZL_VM/log.sh" "$ZL_REPO/packaging/kubernetes/configmap.yaml" \
   "$ZL_REPO/packaging/kubernetes/daemonset.yaml" "$ZL_REPO/tests/support/otlp_receiver.py" \
   "$BOOT_JOB/"
NICS=(-netdev "hubport,id=n1,hubid=0" -device "virtio-net-pci,netdev=n1,mac=52:54:00:7a:10:01"
      -netdev "hubport,id=n2,hubid=0" -device "virtio-net-pci,netdev=n2,mac=52:54:00:7a:10:02")

guest() { # N: boot N runs `guest.sh N`
    job_script bash /zl-job/guest.sh "$1"
    boot --name "$1" --overlay --timeout "$TIMEOUT" --mem 3072 --append net.ifnames=0 "$IMAGE" -- "${NICS[@]}"
}
RC=0
guest 1 || RC=$?
[ "$RC" -ne 0 ] || guest 2 || RC=$?
say "exit status $RC, wall time $((SECONDS - START)) s"
exit "$RC"
