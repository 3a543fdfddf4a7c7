#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install zerolayer's systemd units and its commented example configuration,
# without enabling or starting anything.
#
#   bash packaging/install.sh [ROOT]    ROOT: an image's root (default /)
#
# vagrant/provision.sh calls it on the machine it provisions; the VM rig
# (vagrant/vm/service/image.sh) calls it on an image's root. Files are
# rewritten only when they changed; /etc/zerolayer/zerolayer.toml, the file
# the units read, is never written: the administrator makes it from the
# example (docs/service.md).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${1:-/}"
UNITS="$ROOT/usr/local/lib/systemd/system"
changed=""
put() { # MODE SOURCE TARGET
    if ! cmp -s "$2" "$3"; then
        install -D -m "$1" "$2" "$3"
        changed=1
    fi
}
put 0644 "$HERE/systemd/zerolayer.service" "$UNITS/zerolayer.service"
put 0644 "$HERE/systemd/zerolayer-exporter.service" "$UNITS/zerolayer-exporter.service"
put 0644 "$HERE/zerolayer.toml.example" "$ROOT/etc/zerolayer/zerolayer.toml.example"
# A running systemd learns of changed units now; in an image, at its boot.
if [ -n "$changed" ] && [ "$ROOT" = / ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi
echo "packaging/install.sh: installed zerolayer.service and zerolayer-exporter.service in ${UNITS#"$ROOT"}, not enabled; example configuration /etc/zerolayer/zerolayer.toml.example"
