# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The one logging of zerolayer's shell: say, die, usage, phase, need_root.
# Sourced by vagrant/vm/lib.sh (so by every rig script), by the service
# suite's guest.sh inside the VM (suite.sh puts it in the job share) and by
# packaging/container/build.sh. ZL_ME names the script, ZL_USAGE its usage.

ZL_ME="${ZL_ME:-$(basename "$0")}"
ZL_USAGE="${ZL_USAGE:-}"
say() { printf '%s: %s\n' "$ZL_ME" "$*" >&2; }
die() { say "$*"; exit 1; }
usage() { say "usage: $ZL_USAGE"; exit 2; }
ZL_PHASE=$SECONDS
phase() { say "phase $1 took $((SECONDS - ZL_PHASE)) s"; ZL_PHASE=$SECONDS; }  # NAME: time since the last
need_root() { [ "$(id -u)" -eq 0 ] || die "run me as root${1:+ ($1)}"; }
