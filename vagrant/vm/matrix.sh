#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The kernel matrix: the conformance suite (conformance.sh) on each kernel,
# then the kernel x capability table made from what the runs reported.
#
#   bash vagrant/vm/matrix.sh [--write] [KERNEL...] [--smoke KERNEL...]
#
# KERNEL is a name in vagrant/vm/kernels (booted in the VM by run.sh) or
# `host` (this machine's own kernel); the default is host and every kernel
# listed there. Kernels after --smoke run the smoke
# selection (conformance.sh --smoke), the others the full one. --write
# writes the table into docs/kernels.md as well as printing it. Exits non-zero if
# any kernel failed.
set -euo pipefail
ZL_ME=matrix
# shellcheck source=vagrant/vm/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ZL_USAGE="matrix.sh [--write] [KERNEL...] [--smoke KERNEL...] (KERNEL: host $(kernel_names | paste -sd' '))"

TABLE_DOC=""
if [ "${1:-}" = "--write" ]; then TABLE_DOC="$ZL_REPO/docs/kernels.md"; shift; fi
args=("$@")
[ $# -gt 0 ] || mapfile -t args < <(echo host; kernel_names)
kernels=() selections=() selection=full
for arg in "${args[@]}"; do
    case "$arg" in
        --smoke) selection=smoke; continue ;;
        host) ;;
        *) kernel_row "$arg" || usage ;;
    esac
    kernels+=("$arg"); selections+=("$selection")
done
[ ${#kernels[@]} -gt 0 ] || usage

# Reports go inside the repository: the VM sees it over 9p at the same path.
OUT="$ZL_REPO/.kernel-reports"
mkdir -p "$OUT"
failed=()
for i in "${!kernels[@]}"; do
    kernel="${kernels[i]}" selection="${selections[i]}"
    flag=()
    [ "$selection" = full ] || flag=(--smoke)
    report="$OUT/$kernel.json"
    rm -f "$report"
    start=$SECONDS
    say "conformance on $kernel ($selection selection)"
    if [ "$kernel" = host ]; then
        bash "$ZL_VM/conformance.sh" "${flag[@]}" "$report" || failed+=("$kernel")
    else
        # Under emulation a test run costs ~100x more: 2,000 random datagrams
        # still reach every class of the judge many times over. Two virtio-net
        # NIC pairs: the tests on a real driver (tests/test_nic.py).
        # A guest that never reported a status (125) did not finish the
        # suite: boot once more before calling the kernel failed. A panic
        # (123) is booted again only under thread=multi, whose crashes are
        # the emulator's (docs/kernels.md); under the default it fails.
        for attempt in 1 2; do
            rc=0
            bash "$ZL_VM/run.sh" --kernel "$kernel" --nic-pairs 2 -- \
                env ZEROLAYER_DIFFERENTIAL_CASES=2000 bash vagrant/vm/conformance.sh "${flag[@]}" "$report" \
                || rc=$?
            [ "$attempt" -eq 1 ] || break
            case "$rc:$ZL_TCG_THREAD" in
                123:multi) say "the $kernel guest kernel panicked under thread=multi (the emulator's, see docs/kernels.md): booting once more" ;;
                123:*) say "the $kernel guest kernel panicked: not booted again (only thread=multi's panics are the emulator's)"; break ;;
                125:*) say "the $kernel guest reported no status: booting once more" ;;
                *) break ;;
            esac
        done
        [ "$rc" -eq 0 ] || failed+=("$kernel")
    fi
    say "$kernel took $((SECONDS - start)) s"
done

reports=()
for kernel in "${kernels[@]}"; do
    [ -f "$OUT/$kernel.json" ] && reports+=("$OUT/$kernel.json")
done
if [ ${#reports[@]} -gt 0 ]; then
    python3 "$ZL_VM/kernel_table.py" ${TABLE_DOC:+--write "$TABLE_DOC"} "${reports[@]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
    die "the conformance suite failed on: ${failed[*]}"
fi
