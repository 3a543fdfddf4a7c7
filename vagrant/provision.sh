#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Make a fresh Debian 12 or 13 machine ready for zerolayer, then optionally run it.
#
#   bash vagrant/provision.sh             provision only
#   bash vagrant/provision.sh demo        provision, then run `zerolayer demo`
#   bash vagrant/provision.sh test [ARGS] provision, then run pytest ARGS
#   bash vagrant/provision.sh lint        provision, then ruff and mypy
#   bash vagrant/provision.sh dev         provision for development: an editable
#                                         install with every extra (test, lint, plot)
#
# The README, .ci/run and the Vagrantfile all call this one script. It is
# idempotent: every step checks before it changes anything. Run it as root.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ZEROLAYER_VENV:-/opt/zerolayer/venv}"
ACTION="${1:-}"
[ $# -gt 0 ] && shift

ZL_ME=provision
# say, die, need_root, apt_install, apt_update
# shellcheck source=vagrant/vm/lib.sh
. "$REPO/vagrant/vm/lib.sh"

need_root "sudo bash vagrant/provision.sh ${ACTION}"
case "$ACTION" in ""|demo|test|lint|dev) ;; *) die "unknown action '$ACTION' (use: demo, test, lint, dev)";; esac

# --- apt packages ----------------------------------------------------------
# libxdp1: pyxdp.xsk calls its AF_XDP ring functions, and libbpf1 (its
# dependency) loads every BPF program. bpftool: the tests read the objects'
# BTF with it. tmux: the tests drive
# `zerolayer top` in a pane.
# socat, haproxy: peers of the relay bench; haproxy also serves TLS with
# HTTP/2 (ALPN h2) and h2c in the streams tests (tests/test_streams_http2.py). gcc: the bench compiles its splice
# relay and its delivery C consumer, and pip builds pyxdp's compiled AF_XDP
# core (pyxdp/xsk/_core.c) with it and python3-dev's headers. strace: the
# concurrency test slows a writer of the port set with it
# (tests/test_concurrency.py). clang: builds each BPF program into a CO-RE
# object, once (`zerolayer build`, below); libbpf (or libxdp) loads it.
# wget: a client of the stream observer's tests that speaks TLS through
# GnuTLS, as Debian builds it. nodejs: its https client (a Node already
# installed, such as NodeSource's with OpenSSL in the executable, is kept).
PACKAGES=(python3-venv python3-dev libxdp1 bpftool xdp-tools iproute2 tcpdump ethtool tmux socat haproxy gcc clang strace curl wget nodejs openssl)
# The C consumer's headers and libraries. Best effort: where libbpf1 came
# from a backports suite (with its kernel), the release's libbpf-dev cannot
# be installed beside it, and the bench then skips the consumer with a note.
BENCH_DEV_PACKAGES=(libxdp-dev libbpf-dev)
not_installed() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || echo "$pkg"
    done
}
mapfile -t missing < <(not_installed "${PACKAGES[@]}")
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    apt_install "${missing[@]}"
fi
mapfile -t missing < <(not_installed "${BENCH_DEV_PACKAGES[@]}")
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    apt_install "${missing[@]}" \
        || say "could not install ${missing[*]}: zerolayer bench will skip its C consumer"
fi
# What reads the man pages and the bash completion installed below. Best
# effort: the VM rig's guests (vagrant/vm) have no network, and zerolayer
# runs without them.
DOCS_PACKAGES=(man-db bash-completion)
mapfile -t missing < <(not_installed "${DOCS_PACKAGES[@]}")
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    apt_install "${missing[@]}" \
        || say "could not install ${missing[*]}: man pages and bash completion are installed all the same"
fi

# promtool checks the exporters' text (the metrics tests run it). It
# ships only in Debian's prometheus package, whose install would start a
# Prometheus server: the package is unpacked under /opt/zerolayer instead, and
# only promtool is put on PATH.
PROMTOOL_DIR=/opt/zerolayer/prometheus
if [ ! -x "$PROMTOOL_DIR/usr/bin/promtool" ]; then
    apt_update
    deb_dir="$(mktemp -d)"
    mkdir -p "$PROMTOOL_DIR"  # dpkg-deb -x makes no parent: a fresh machine has no /opt/zerolayer yet
    # three tries: a mirror's transient failure left a fresh machine without
    # it; none more where there is no network at all (the VM rig's guests)
    for try in 1 2 3; do
        if (cd "$deb_dir" && apt-get download -q prometheus >/dev/null 2>"$deb_dir/err") \
            && dpkg-deb -x "$deb_dir"/prometheus_*.deb "$PROMTOOL_DIR"; then
            say "unpacked promtool from Debian's prometheus into $PROMTOOL_DIR"
            break
        fi
        rm -f "$deb_dir"/*.deb
        if grep -q -e "Temporary failure resolving" -e "Could not resolve" "$deb_dir/err" \
            || [ "$try" -eq 3 ]; then
            break
        fi
        sleep 5
    done
    [ -x "$PROMTOOL_DIR/usr/bin/promtool" ] \
        || say "could not unpack Debian's prometheus: the exposition tests check without promtool"
    rm -rf "$deb_dir"
fi
[ -x "$PROMTOOL_DIR/usr/bin/promtool" ] && ln -sfn "$PROMTOOL_DIR/usr/bin/promtool" /usr/local/bin/promtool

# --- bpffs ------------------------------------------------------------------
# mode=0700: the default 1777 lets any user make directories where root's
# pins go (zerolayer refuses those, docs/service.md); systemd mounts it 0700.
if ! mountpoint -q /sys/fs/bpf; then
    mount -t bpf -o mode=0700 bpf /sys/fs/bpf
    say "mounted bpffs on /sys/fs/bpf (mode 0700)"
fi

# --- venv ----------------------------------------------------------------------
if ! "$VENV/bin/python" -c "import sys" 2>/dev/null; then
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
    say "created venv $VENV"
fi
# Users and CI get a plain install of the tree as it is now, even if the
# version number did not change: uninstall first, so pip builds it once.
# Developers (`dev`) get an editable one: the venv runs the checkout itself.
case "$ACTION" in
    dev)  EXTRAS="test,lint,plot"; EDITABLE=(--editable) ;;
    lint) EXTRAS="lint"; EDITABLE=() ;;
    *)    EXTRAS="test"; EDITABLE=() ;;
esac
"$VENV/bin/pip" uninstall --quiet --yes zerolayer 2>/dev/null || true
# setuptools builds in the tree's build/ and never empties it: a module
# removed from the tree would still be copied from there into the venv.
rm -rf "$REPO/build"
# No build isolation: the venv's own setuptools and wheel build it, so a
# machine (or VM) that already has every dependency installs without
# reaching an index.
"$VENV/bin/python" -c "import setuptools, wheel" 2>/dev/null \
    || "$VENV/bin/pip" install --quiet --disable-pip-version-check "setuptools>=64" wheel
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation \
    "${EDITABLE[@]}" "${REPO}[$EXTRAS]"
ln -sfn "$VENV/bin/zerolayer" /usr/local/bin/zerolayer
say "ready: $("$VENV/bin/zerolayer" --version)"
# Every BPF object, built now into root's cache, so that no command compiles
# (those of an unchanged tree are found there).
if [ "$ACTION" != lint ]; then
    say "BPF objects: $("$VENV/bin/zerolayer" build | tail -n 1)"
fi

# --- man pages and bash completion -------------------------------------------
# zerolayer(8), zerolayer-attach(8), ... from the command pages in docs/commands
# (docs/build_man.py: the standard library only), and click's own completion
# script. Each is rewritten only when it changed.
MAN_ROOT=/usr/local/share/man
man_sum() { { cat "$MAN_ROOT"/man8/zerolayer*.8 2>/dev/null || true; } | cksum; }
before="$(man_sum)"
/usr/bin/python3 "$REPO/docs/build_man.py" "$MAN_ROOT/man8"
if [ "$(man_sum)" != "$before" ] && command -v mandb >/dev/null; then
    mandb -q "$MAN_ROOT" || say "mandb failed: man finds the pages all the same"
fi
COMPLETION=/usr/share/bash-completion/completions/zerolayer
mkdir -p "$(dirname "$COMPLETION")"
if _ZEROLAYER_COMPLETE=bash_source "$VENV/bin/zerolayer" >"$COMPLETION.new"; then
    if cmp -s "$COMPLETION.new" "$COMPLETION"; then rm -f "$COMPLETION.new"; else mv -f "$COMPLETION.new" "$COMPLETION"; fi
else
    rm -f "$COMPLETION.new"
    say "could not write $COMPLETION"
fi

# --- systemd units -------------------------------------------------------------
# zerolayer.service (apply --watch) and zerolayer-exporter.service, and a
# commented example of /etc/zerolayer/zerolayer.toml; nothing is enabled
# (docs/service.md says how).
bash "$REPO/packaging/install.sh"

case "$ACTION" in
    demo) exec "$VENV/bin/zerolayer" demo ;;
    # pytest runs from the repository but imports the installed package:
    # the tests directory, not the repository root, goes on sys.path.
    test) cd "$REPO" && exec "$VENV/bin/pytest" "$@" ;;
    # The library only (pyproject.toml configures both); no new error passes.
    lint) cd "$REPO" && "$VENV/bin/ruff" check . && exec "$VENV/bin/mypy" ;;
    dev) say "editable: $VENV runs $REPO; \`cd $REPO && $VENV/bin/pytest\` runs the tests" ;;
esac
