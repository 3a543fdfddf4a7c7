#!/usr/bin/env bash
# The kernel conformance suite on the kernel this runs on (a VM's, or the
# host's): provisioning, then the tests marked `kernel`, with the capability
# report (tests/capabilities.py) written to REPORT.
#
#   bash vagrant/vm/conformance.sh REPORT.json [PYTEST ARGS...]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REPORT="$(realpath -m "${1:?usage: conformance.sh REPORT.json [PYTEST ARGS...]}")"
shift
mkdir -p "$(dirname "$REPORT")"
export ZEROLAYER_CAPABILITIES="$REPORT"
echo "conformance: kernel $(uname -r), differential cases ${ZEROLAYER_DIFFERENTIAL_CASES:-20000}"
exec bash "$REPO/vagrant/provision.sh" test -m kernel -v --durations=25 "$@"
