#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The service suite: zerolayer under systemd (and podman kube play) in a
# Debian 13 VM with systemd as PID 1, booted twice from one disk.
#
#   bash vagrant/vm/service/suite.sh [--timeout SECONDS]
#
# image.sh builds (once) the image; the disk is a qcow2 overlay on it, kept
# between the two boots and removed at the end, so the cached image is never
# written. Boot 1 runs `guest.sh 1`, boot 2 `guest.sh 2` (what each proves is
# at the top of guest.sh). The guest has two virtio NICs, eth0 and eth1, on
# one internal qemu hub and no other network. Prints each phase's time;
# exits 0 when both boots passed (1: a check failed; 125: a boot reported no
# status; the serial logs stay in /tmp/zerolayer-vm-logs/service-*). TCG
# unless ZEROLAYER_VM_ACCEL=kvm. Run it as root.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
TIMEOUT=1200
say() { printf 'vagrant/vm/service/suite.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) TIMEOUT="${2:?}"; shift 2 ;;
        *) die "usage: suite.sh [--timeout SECONDS]" ;;
    esac
done
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "usage: suite.sh [--timeout SECONDS]"
[ "$(id -u)" -eq 0 ] || die "run me as root"
START=$SECONDS
command -v qemu-img >/dev/null || {
    say "installing qemu-utils (qemu-img)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends qemu-utils >&2
}

IMAGE="$(bash "$HERE/image.sh")"
say "image ready after $((SECONDS - START)) s: $IMAGE"

WORK="$(mktemp -d /tmp/zerolayer-service-suite.XXXXXX)"
LOGDIR="/tmp/zerolayer-vm-logs/service-$(date +%Y%m%d-%H%M%S)-$$"
mkdir -p "$LOGDIR" "$WORK/job"
QPID="" TPID=""
cleanup() {
    [ -n "$TPID" ] && kill "$TPID" 2>/dev/null || true
    if [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null; then
        kill "$QPID" 2>/dev/null || true
        wait "$QPID" 2>/dev/null || true
    fi
    cp "$WORK"/job/output.log "$LOGDIR/" 2>/dev/null || true
    rm -rf "$WORK"
    say "logs in $LOGDIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The disk both boots share.
qemu-img create -q -f qcow2 -F raw -b "$IMAGE/rootfs.ext4" "$WORK/disk.qcow2"
# What the guest runs and reads: the job share, never the repository.
cp "$HERE/guest.sh" "$REPO/packaging/kubernetes/configmap.yaml" \
   "$REPO/packaging/kubernetes/daemonset.yaml" "$WORK/job/"
ACCEL=(-accel tcg,thread=multi -cpu max)
[ -w /dev/kvm ] && [ "${ZEROLAYER_VM_ACCEL:-tcg}" = kvm ] && ACCEL=(-accel kvm -cpu host)

boot() { # N: boot the VM, run `guest.sh N`, return its status
    local n="$1" t0=$SECONDS status
    rm -f "$WORK/job/status"
    printf 'exec bash /zl-job/guest.sh %s\n' "$n" >"$WORK/job/job.sh"
    : >>"$WORK/job/output.log"
    qemu-system-x86_64 -nodefaults -display none -monitor none -no-reboot \
        "${ACCEL[@]}" -smp 2 -m 3072 \
        -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
        -append "root=/dev/vda rw console=ttyS0 net.ifnames=0 quiet panic=1" \
        -drive "file=$WORK/disk.qcow2,if=virtio,format=qcow2" \
        -device virtio-rng-pci \
        -netdev hubport,id=n1,hubid=0 -device virtio-net-pci,netdev=n1,mac=52:54:00:7a:10:01 \
        -netdev hubport,id=n2,hubid=0 -device virtio-net-pci,netdev=n2,mac=52:54:00:7a:10:02 \
        -virtfs "local,path=$WORK/job,mount_tag=job,security_model=none,id=job" \
        -serial "file:$LOGDIR/serial-$n.log" </dev/null >"$LOGDIR/qemu-$n.log" 2>&1 &
    QPID=$!
    tail -n 0 -s 0.5 -f --pid="$QPID" "$WORK/job/output.log" &
    TPID=$!
    while kill -0 "$QPID" 2>/dev/null; do
        if [ $((SECONDS - t0)) -ge "$TIMEOUT" ]; then
            say "boot $n: timeout after $TIMEOUT s; serial log $LOGDIR/serial-$n.log"
            kill "$QPID"
            break
        fi
        sleep 1
    done
    wait "$QPID" || true
    QPID=""
    wait "$TPID" 2>/dev/null || true
    TPID=""
    status="$(cat "$WORK/job/status" 2>/dev/null || echo 125)"
    say "phase boot $n: $((SECONDS - t0)) s, guest status $status"
    [ "$status" = 125 ] && tail -n 15 "$LOGDIR/serial-$n.log" | sed 's/^/    /' >&2
    return "$status"
}

RC=0
boot 1 || RC=$?
[ "$RC" -ne 0 ] || boot 2 || RC=$?
say "exit status $RC, wall time $((SECONDS - START)) s"
exit "$RC"
