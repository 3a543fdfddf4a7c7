#!/usr/bin/env bash
# The kernel matrix: the conformance suite (conformance.sh) on each kernel,
# then the kernel x capability table made from what the runs reported.
#
#   bash vagrant/vm/matrix.sh [--readme] [KERNEL...]
#
# KERNEL is 6.1 or 6.12 (booted in the VM by run.sh) or `host` (this
# machine's own kernel); the default is all three. --readme writes the table
# into README.md as well as printing it. Exits non-zero if any kernel failed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
README=""
if [ "${1:-}" = "--readme" ]; then README="$REPO/README.md"; shift; fi
[ $# -gt 0 ] || set -- host 6.1 6.12

# Reports go inside the repository: the VM sees it over 9p at the same path.
OUT="$REPO/.kernel-reports"
mkdir -p "$OUT"
failed=()
for kernel in "$@"; do
    report="$OUT/$kernel.json"
    rm -f "$report"
    start=$SECONDS
    echo "matrix: conformance on $kernel"
    if [ "$kernel" = host ]; then
        bash "$HERE/conformance.sh" "$report" || failed+=("$kernel")
    else
        # Under emulation a test run costs ~100x more: 2,000 random datagrams
        # still reach every class of the judge many times over.
        bash "$HERE/run.sh" --kernel "$kernel" -- \
            env ZEROLAYER_DIFFERENTIAL_CASES=2000 bash vagrant/vm/conformance.sh "$report" \
            || failed+=("$kernel")
    fi
    echo "matrix: $kernel took $((SECONDS - start)) s"
done

reports=()
for kernel in "$@"; do
    [ -f "$OUT/$kernel.json" ] && reports+=("$OUT/$kernel.json")
done
if [ ${#reports[@]} -gt 0 ]; then
    python3 "$HERE/kernel_table.py" ${README:+--readme "$README"} "${reports[@]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "matrix: the conformance suite failed on: ${failed[*]}" >&2
    exit 1
fi
