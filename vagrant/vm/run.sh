#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Boot a Debian test image under qemu and run one command inside it, as root,
# in the repository (shared in over 9p at the same absolute path as here).
#
#   bash vagrant/vm/run.sh [--kernel 5.10|6.1|6.12|7.3] [--timeout SECONDS] [--mem MB]
#                          [--nic-pairs N] -- COMMAND [ARGS...]
#
# --nic-pairs N gives the guest N pairs of virtio-net NICs, each pair alone
# on an internal qemu hub (no backend: nothing leaves qemu), with the
# options zero-copy AF_XDP needs (a DMA device: iommu_platform=on, which
# needs disable-legacy=on). Pair P's NICs have the MACs 52:54:00:7a:0P:01
# and :02; the tests find them by those (tests/support/nic_lab.py).
#
# The command's output streams to stdout; this script exits with its status
# (124 on timeout, 125 if the guest never reported one). ZEROLAYER_VM_ACCEL=
# tcg|kvm skips the accelerator probe.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${ZEROLAYER_VM_CACHE:-/var/cache/zerolayer/vm}"
KERNEL=6.1 TIMEOUT=3600 MEM=4096 NIC_PAIRS=0

say() { printf 'run.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }
usage() { die "usage: run.sh [--kernel 5.10|6.1|6.12|7.3] [--timeout SECONDS] [--mem MB] [--nic-pairs N] -- COMMAND [ARGS...]"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --kernel) KERNEL="${2:?}"; shift 2 ;;
        --timeout) TIMEOUT="${2:?}"; shift 2 ;;
        --mem) MEM="${2:?}"; shift 2 ;;
        --nic-pairs) NIC_PAIRS="${2:?}"; shift 2 ;;
        --) shift; break ;;
        *) usage ;;
    esac
done
[ $# -gt 0 ] || usage
[[ "$TIMEOUT" =~ ^[0-9]+$ && "$MEM" =~ ^[0-9]+$ && "$NIC_PAIRS" =~ ^[0-9]$ ]] || usage
START=$SECONDS

IMAGE="$(bash "$HERE/image.sh" "$KERNEL")"
KREL="$(cat "$IMAGE/kernel-release")"

# --- per-run state, removed on every exit path ------------------------------
RUNID="$(date +%Y%m%d-%H%M%S)-$$"
LOGDIR="/tmp/zerolayer-vm-logs/$RUNID"
mkdir -p "$LOGDIR"
JOB="$(mktemp -d /tmp/zerolayer-vm-job.XXXXXX)"
QPID="" TPID="" DONE=""
cleanup() {
    # Interrupted: still say where the logs are.
    [ -n "$DONE" ] || say "stopped before the job finished; serial log $LOGDIR/serial.log"
    [ -n "$TPID" ] && kill "$TPID" 2>/dev/null || true
    if [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null; then
        kill "$QPID" 2>/dev/null || true
        wait "$QPID" 2>/dev/null || true
    fi
    [ -f "$JOB/output.log" ] && cp "$JOB/output.log" "$LOGDIR/output.log"
    rm -rf "$JOB"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Both boots use -snapshot: writes go to a temporary overlay, so the cached
# image stays pristine and runs can share it. -nodefaults: no VGA, no default
# NIC, no monitor on stdio.
ACCEL_KVM=(-accel kvm -cpu host)
ACCEL_TCG=(-accel tcg,thread=multi -cpu max)

# --- accelerator --------------------------------------------------------------
# KVM when it really works. /dev/kvm can exist and still not run a stock
# kernel (a paravirtual "kvm-pvm" host does that), so a short probe boot
# decides; its answer is kept for this host boot only.
probe_kvm() { # prints "kvm|tcg REASON"
    local log="$LOGDIR/probe-serial.log" pid t=0
    # In a subshell whose stderr is the probe log: a qemu that aborts (as on
    # kvm-pvm) gets its "Aborted" shell message written there, not here.
    ( qemu-system-x86_64 -nodefaults -display none -monitor none -no-reboot \
        "${ACCEL_KVM[@]}" -smp 1 -m 512 \
        -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
        -append "root=/dev/vda rw console=ttyS0 init=/sbin/zl-init quiet panic=1 zl.probe" \
        -drive "file=$IMAGE/rootfs.ext4,if=virtio,format=raw" -snapshot \
        -serial "file:$log" || exit ) </dev/null >"$LOGDIR/probe-qemu.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && ! grep -qs zl-probe-ok "$log" && [ $t -lt 400 ]; do
        sleep 0.1; t=$((t + 1))
    done
    # qemu is the subshell's child: a probe that hangs (kvm-pvm can) would
    # outlive a kill of the subshell alone.
    pkill -P "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if grep -qs zl-probe-ok "$log"; then
        echo "kvm probe boot reached userspace in $((t / 10)) s"
    elif [ $t -ge 400 ]; then
        echo "tcg kvm probe boot showed no sign of life in 40 s"
    else
        echo "tcg kvm probe boot failed: $(head -n 1 "$LOGDIR/probe-qemu.log" 2>/dev/null)"
    fi
}
case "${ZEROLAYER_VM_ACCEL:-}" in
    kvm|tcg) ACCEL="$ZEROLAYER_VM_ACCEL"; WHY="forced by ZEROLAYER_VM_ACCEL" ;;
    "")
        if [ ! -w /dev/kvm ]; then
            ACCEL=tcg WHY="no usable /dev/kvm"
        else
            BOOT_ID="$(cat /proc/sys/kernel/random/boot_id)"
            PROBE="$CACHE/accel-probe"
            if [ "$(sed -n 1p "$PROBE" 2>/dev/null)" != "$BOOT_ID" ]; then
                say "probing KVM (at most once per host boot, up to 40 s)"
                { echo "$BOOT_ID"; probe_kvm; } >"$PROBE.tmp" && mv "$PROBE.tmp" "$PROBE"
            fi
            read -r ACCEL WHY < <(sed -n 2p "$PROBE")
            WHY="$WHY (cached for this host boot in $PROBE)"
        fi ;;
    *) die "ZEROLAYER_VM_ACCEL must be tcg or kvm" ;;
esac
if [ "$ACCEL" = kvm ]; then ACCEL_ARGS=("${ACCEL_KVM[@]}"); else ACCEL_ARGS=("${ACCEL_TCG[@]}"); fi
say "accelerator $ACCEL: $WHY"
say "kernel $KERNEL ($KREL), accel $ACCEL, image $IMAGE, logs $LOGDIR"

# --- the job --------------------------------------------------------------------
# zl-init mounts the repo share at this path, then runs job.sh from the job
# share; %q keeps every argument exactly as given here.
echo "$REPO" >"$JOB/repo-path"
{
    printf 'cd %q || exit 125\n' "$REPO"
    printf 'exec'; printf ' %q' "$@"; printf '\n'
} >"$JOB/job.sh"

NICS=()
for ((pair = 0; pair < NIC_PAIRS; pair++)); do
    for end in 1 2; do
        NICS+=(-netdev "hubport,id=zl$pair$end,hubid=$pair"
               -device "virtio-net-pci,netdev=zl$pair$end,mac=52:54:00:7a:0$pair:0$end,disable-legacy=on,iommu_platform=on")
    done
done

SERIAL="$LOGDIR/serial.log"
qemu-system-x86_64 -nodefaults -display none -monitor none -no-reboot \
    "${ACCEL_ARGS[@]}" -smp 2 -m "$MEM" \
    -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 init=/sbin/zl-init quiet panic=1" \
    -drive "file=$IMAGE/rootfs.ext4,if=virtio,format=raw" -snapshot \
    -device virtio-rng-pci \
    -nic none "${NICS[@]}" \
    -virtfs "local,path=$REPO,mount_tag=repo,security_model=none,id=repo" \
    -virtfs "local,path=$JOB,mount_tag=job,security_model=none,id=job" \
    -serial "file:$SERIAL" </dev/null >"$LOGDIR/qemu.log" 2>&1 &
QPID=$!

# Stream the job's output as the guest writes it (the job share is mounted
# cache=none in the guest, so writes land here at once).
(
    while [ ! -e "$JOB/output.log" ]; do
        kill -0 "$QPID" 2>/dev/null || exit 0
        sleep 0.2
    done
    exec tail -n +1 -s 0.2 -f --pid="$QPID" "$JOB/output.log"
) &
TPID=$!

BOOT_START=$SECONDS BOOT_EPOCH=$(date +%s) TIMED_OUT=""
while kill -0 "$QPID" 2>/dev/null; do
    if [ $((SECONDS - BOOT_START)) -ge "$TIMEOUT" ]; then
        TIMED_OUT=1
        kill "$QPID" 2>/dev/null || true
        break
    fi
    sleep 0.5
done
QRC=0
wait "$QPID" || QRC=$?
QPID=""
wait "$TPID" 2>/dev/null || true
TPID=""

# zl-init writes kernel-release just before the job starts: its mtime tells
# how long the boot took.
BOOTED="?"
[ -f "$JOB/kernel-release" ] && BOOTED=$(( $(stat -c %Y "$JOB/kernel-release") - BOOT_EPOCH ))
if [ -n "$TIMED_OUT" ]; then
    say "timeout: the job ran past ${TIMEOUT} s; killed qemu"
    RC=124
elif [ -f "$JOB/status" ]; then
    RC="$(cat "$JOB/status")"
else
    say "qemu exited (status $QRC) before the job reported a status: $(tail -n 1 "$LOGDIR/qemu.log" 2>/dev/null)"
    # The guest's last words say why (a panic, a share that would not mount).
    say "the serial console's last lines:"
    tail -n 15 "$SERIAL" 2>/dev/null | sed 's/^/    /' >&2 || true
    RC=125
fi
DONE=1
say "exit status $RC, wall time $((SECONDS - START)) s (guest up after $BOOTED s, accel $ACCEL), serial log $SERIAL"
exit "$RC"
