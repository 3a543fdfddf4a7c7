#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Boot a Debian test image under qemu and run one command inside it, as root,
# in the repository (shared in over 9p at the same absolute path as here).
#
#   bash vagrant/vm/run.sh [--kernel KERNEL] [--timeout SECONDS] [--mem MB]
#                          [--nic-pairs N] -- COMMAND [ARGS...]
#
# KERNEL is a name in vagrant/vm/kernels (default 6.1, Debian 12's own).
# --nic-pairs N gives the guest N pairs of virtio-net NICs, each pair alone
# on an internal qemu hub (no backend: nothing leaves qemu), with the
# options zero-copy AF_XDP needs (a DMA device: iommu_platform=on, which
# needs disable-legacy=on). Pair P's NICs have the MACs 52:54:00:7a:0P:01
# and :02; the tests find them by those (tests/support/nic_lab.py).
#
# The command's output streams to stdout; this script exits with its status
# (124 on timeout, 123 if the guest kernel crashed, 125 if the guest never
# reported a status for another reason; lib.sh's boot). ZEROLAYER_VM_ACCEL=
# tcg|kvm skips the accelerator probe; ZL_TCG_THREAD=single|multi (single)
# is TCG's thread option.
set -euo pipefail
# shellcheck source=vagrant/vm/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ZL_USAGE="run.sh [--kernel $(kernel_names | paste -sd'|')] [--timeout SECONDS] [--mem MB] [--nic-pairs N] -- COMMAND [ARGS...]"

KERNEL=6.1 TIMEOUT=3600 MEM=4096 NIC_PAIRS=0
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
kernel_row "$KERNEL" || usage
START=$SECONDS

IMAGE="$(bash "$ZL_VM/image.sh" "$KERNEL")"
boot_setup
say "kernel $KERNEL ($(cat "$IMAGE/kernel-release")), image $IMAGE, logs $BOOT_LOGDIR"
job_script --cd "$ZL_REPO" "$@"

NICS=(-nic none)
for ((pair = 0; pair < NIC_PAIRS; pair++)); do
    for end in 1 2; do
        NICS+=(-netdev "hubport,id=zl$pair$end,hubid=$pair"
               -device "virtio-net-pci,netdev=zl$pair$end,mac=52:54:00:7a:0$pair:0$end,disable-legacy=on,iommu_platform=on")
    done
done

RC=0
boot --repo --timeout "$TIMEOUT" --mem "$MEM" --append "init=/sbin/zl-init" "$IMAGE" -- "${NICS[@]}" || RC=$?
say "exit status $RC, wall time $((SECONDS - START)) s"
exit "$RC"
