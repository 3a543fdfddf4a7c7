#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The kernel conformance suite on the kernel this runs on (a VM's, or the
# host's): provisioning, then the tests marked `kernel` (with --smoke, only
# those also marked `smoke`: one or two per column of the kernel table), with
# the capability report (tests/support/capabilities.py) written to REPORT.
#
#   bash vagrant/vm/conformance.sh [--smoke] REPORT.json [PYTEST ARGS...]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SELECTION=full MARKS=kernel
if [ "${1:-}" = --smoke ]; then SELECTION=smoke MARKS="kernel and smoke"; shift; fi
REPORT="$(realpath -m "${1:?usage: conformance.sh [--smoke] REPORT.json [PYTEST ARGS...]}")"
shift
mkdir -p "$(dirname "$REPORT")"
# What the report (and so the kernel table) says the suite ran on.
# A package's upstream version: no epoch ("1:"), no Debian revision.
version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null | sed 's/^[0-9]*://; s/[-+~].*//' || echo "?"; }
# clang's own version: the clang package is a metapackage ("19.0").
clang_version() { /usr/bin/clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9.]*\).*/\1/p' | head -n 1; }
export ZEROLAYER_CAPABILITIES="$REPORT" ZEROLAYER_SELECTION="$SELECTION"
ZEROLAYER_SYSTEM="Debian $(cat /etc/debian_version 2>/dev/null || echo "?"), Python $(/usr/bin/python3 -c 'import platform; print(platform.python_version())'), clang $(clang_version), libbpf $(version libbpf1), libxdp $(version libxdp1)"
export ZEROLAYER_SYSTEM
echo "conformance: kernel $(uname -r), $ZEROLAYER_SYSTEM, $SELECTION selection, differential cases ${ZEROLAYER_DIFFERENTIAL_CASES:-20000}"
tainted="$(cat /proc/sys/kernel/tainted)"
rc=0
bash "$REPO/vagrant/provision.sh" test -m "$MARKS" -v --durations=25 "$@" || rc=$?
# A kernel warning during the run taints the kernel (512): show what it said.
if [ "$(cat /proc/sys/kernel/tainted)" != "$tainted" ]; then
    echo "conformance: the kernel was tainted during the run ($tainted -> $(cat /proc/sys/kernel/tainted)); its warnings:"
    dmesg --level=emerg,alert,crit,err,warn | tail -n 80
fi
# pytest's 5: nothing collected. A selection that names no test proves nothing.
[ "$rc" -ne 5 ] || { echo "conformance: the $SELECTION selection ('$MARKS') collected no test" >&2; exit 1; }
exit "$rc"
