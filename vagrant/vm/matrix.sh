#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The kernel matrix: the conformance suite (conformance.sh) on each kernel,
# then the kernel x capability table made from what the runs reported.
#
#   bash vagrant/vm/matrix.sh [--readme] [KERNEL...] [--smoke KERNEL...]
#
# KERNEL is 5.10, 6.1, 6.12 or 7.3 (booted in the VM by run.sh; image.sh
# says what each is) or `host` (this machine's own kernel); the default is
# host and the four VM kernels. Kernels after --smoke run the smoke
# selection (conformance.sh --smoke), the others the full one. --readme
# writes the table into README.md as well as printing it. Exits non-zero if
# any kernel failed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
README=""
if [ "${1:-}" = "--readme" ]; then README="$REPO/README.md"; shift; fi
[ $# -gt 0 ] || set -- host 5.10 6.1 6.12 7.3
kernels=() selections=() selection=full
for arg in "$@"; do
    case "$arg" in
        --smoke) selection=smoke ;;
        host|5.10|6.1|6.12|7.3) kernels+=("$arg"); selections+=("$selection") ;;
        *) echo "matrix: unknown kernel '$arg' (use host, 5.10, 6.1, 6.12, 7.3; --smoke before the smoke ones)" >&2; exit 2 ;;
    esac
done
[ ${#kernels[@]} -gt 0 ] || { echo "matrix: no kernel given after --smoke" >&2; exit 2; }

# Reports go inside the repository: the VM sees it over 9p at the same path.
OUT="$REPO/.kernel-reports"
mkdir -p "$OUT"
failed=()
for i in "${!kernels[@]}"; do
    kernel="${kernels[i]}" selection="${selections[i]}"
    flag=()
    [ "$selection" = full ] || flag=(--smoke)
    report="$OUT/$kernel.json"
    rm -f "$report"
    start=$SECONDS
    echo "matrix: conformance on $kernel ($selection selection)"
    if [ "$kernel" = host ]; then
        bash "$HERE/conformance.sh" "${flag[@]}" "$report" || failed+=("$kernel")
    else
        # Under emulation a test run costs ~100x more: 2,000 random datagrams
        # still reach every class of the judge many times over. Two virtio-net
        # NIC pairs: the tests on a real driver (tests/test_nic.py).
        # A guest that never reports a status (run.sh's 125) did not run the
        # suite at all: boot once more before calling the kernel failed.
        for attempt in 1 2; do
            rc=0
            bash "$HERE/run.sh" --kernel "$kernel" --nic-pairs 2 -- \
                env ZEROLAYER_DIFFERENTIAL_CASES=2000 bash vagrant/vm/conformance.sh "${flag[@]}" "$report" \
                || rc=$?
            [ "$rc" -eq 125 ] && [ "$attempt" -eq 1 ] || break
            echo "matrix: the $kernel guest reported no status; booting it again"
        done
        [ "$rc" -eq 0 ] || failed+=("$kernel")
    fi
    echo "matrix: $kernel took $((SECONDS - start)) s"
done

reports=()
for kernel in "${kernels[@]}"; do
    [ -f "$OUT/$kernel.json" ] && reports+=("$OUT/$kernel.json")
done
if [ ${#reports[@]} -gt 0 ]; then
    python3 "$HERE/kernel_table.py" ${README:+--readme "$README"} "${reports[@]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "matrix: the conformance suite failed on: ${failed[*]}" >&2
    exit 1
fi
