#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make vagrant-check`: a Vagrant user's path, end to end, on this machine.
#
#   bash vagrant/check.sh
#
# 1. Debian's vagrant, vagrant-libvirt and libvirt's daemon and qemu driver
#    (not libvirt-daemon-system: no host service, no default network).
# 2. A local box made of Debian 12's packages (vagrant/box.sh), added under
#    a name of this run's.
# 3. In a network namespace and a mount namespace of this run's, a libvirtd
#    of its own (its configuration, state and images in this run's work
#    directory), so the management network (vagrant-libvirt's 192.168.121.0/24)
#    and every packet to the VM stay inside the namespace.
# 4. With the repository's Vagrantfile: `vagrant up --provider=libvirt`
#    (emulated when KVM cannot run a stock kernel: the VM rig's probe
#    decides), `vagrant ssh -c 'sudo zerolayer demo'`, `vagrant provision
#    --provision-with test` (the suite's smoke selection: its veth and
#    namespace tests of every kernel feature), `vagrant destroy -f`.
# 5. Everything removed on every exit path: the VM, the box, the network,
#    the daemon, the namespaces, the work directory; then checked gone.
#
# Prints each phase's time; exits 0 when the demo said "every counter
# matches" and the tests passed. Run it as root.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
ZL_ME=vagrant/check.sh
# shellcheck source=vagrant/vm/lib.sh
. "$HERE/vm/lib.sh"
# The pytest arguments of the test provisioner: the smoke selection, as CI
# runs it on each kernel (vagrant/vm/conformance.sh).
TEST_ARGS='-m "kernel and smoke"'

# --- inside the namespaces ---------------------------------------------------------
if [ "${1:-}" = --inner ]; then
    WORK="${2:?}"
    # libvirt's directories, this run's: the host's are hidden, not touched.
    mount -t tmpfs tmpfs /run
    # The users the daemon resolves at start (as libvirt-daemon-system would
    # add them), in this namespace's copy of the account files only: qemu
    # runs as root here, dnsmasq as nobody.
    cp /etc/passwd "$WORK/passwd"
    cp /etc/group "$WORK/group"
    for user in libvirt-qemu libvirt-dnsmasq; do
        getent passwd "$user" >/dev/null || echo "$user:x:65534:65534::/nonexistent:/usr/sbin/nologin" >>"$WORK/passwd"
        getent group "$user" >/dev/null || echo "$user:x:65534:" >>"$WORK/group"
    done
    mount --bind "$WORK/passwd" /etc/passwd
    mount --bind "$WORK/group" /etc/group
    for dir in etc/libvirt var/lib/libvirt var/cache/libvirt var/log/libvirt; do
        mkdir -p "$WORK/libvirt/$dir"
        mount --bind "$WORK/libvirt/$dir" "/$dir"
    done
    # qemu as root, no per-VM relabelling or namespaces, console to a file
    # (no virtlogd): a daemon that lives for this run only.
    cat >/etc/libvirt/qemu.conf <<'EOF'
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
namespaces = []
stdio_handler = "file"
swtpm_user = "root"
swtpm_group = "root"
EOF
    echo 'log_outputs = "3:file:/var/log/libvirt/libvirtd.log"' >/etc/libvirt/libvirtd.conf
    libvirtd --daemon --pid-file "$WORK/libvirtd.pid"
    for _ in $(seq 100); do [ -S /run/libvirt/libvirt-sock ] && break; sleep 0.1; done
    [ -S /run/libvirt/libvirt-sock ] || die "libvirtd did not start: $(tail -n 3 /var/log/libvirt/libvirtd.log 2>/dev/null)"
    mkdir -p /var/lib/libvirt/images
    virsh -q pool-define-as default dir --target /var/lib/libvirt/images >/dev/null
    virsh -q pool-start default >/dev/null
    say "libvirtd $(libvirtd --version | awk '{ print $NF }') of this run's, in netns $(ip netns identify)"
    export HOME="$WORK/home" VAGRANT_HOME="$WORK/home/.vagrant.d" VAGRANT_DOTFILE_PATH="$WORK/dot"
    export VAGRANT_CWD="$REPO/vagrant" VAGRANT_CHECKPOINT_DISABLE=1 VAGRANT_BOX_UPDATE_CHECK_DISABLE=1
    export VAGRANT_DEFAULT_PROVIDER=libvirt ZEROLAYER_VAGRANT_TEST_ARGS="$TEST_ARGS"
    mkdir -p "$HOME"
    ZL_PHASE=$SECONDS
    vagrant box add --name "$ZEROLAYER_VAGRANT_BOX" "$BOX" >&2
    phase "vagrant box add"
    vagrant up --provider=libvirt 2>&1 | tee "$WORK/up.log" >&2
    if [ -n "$EMULATE" ]; then
        grep -q "zerolayer: libvirt emulates this VM" "$WORK/up.log" ||
            die "KVM cannot boot a stock kernel here, and the Vagrantfile did not say it emulates"
    fi
    phase "vagrant up (boot, rsync, provision)"
    vagrant ssh -c 'sudo zerolayer demo' 2>&1 | tee "$WORK/demo.log" >&2
    grep -q "every counter matches" "$WORK/demo.log" || die "the demo did not say: every counter matches"
    phase "vagrant ssh -c 'sudo zerolayer demo'"
    vagrant provision --provision-with test 2>&1 | tee "$WORK/test.log" >&2
    summary="$(grep -E '=+ .*(passed|failed).* in [0-9.]+s' "$WORK/test.log" | tail -n 1)"
    [ -n "$summary" ] || die "the test provisioner printed no pytest summary"
    case "$summary" in *failed*|*error*) die "the tests in the VM failed: $summary" ;; esac
    say "tests in the VM: $summary"
    phase "vagrant provision --provision-with test"
    vagrant destroy -f >&2
    vagrant box remove --force "$ZEROLAYER_VAGRANT_BOX" >&2
    [ -z "$(virsh -q list --all)" ] || die "a domain outlived vagrant destroy: $(virsh -q list --all)"
    phase "vagrant destroy -f, box removed"
    exit 0
fi

# --- on the host --------------------------------------------------------------------
need_root
START=$SECONDS
ZL_PHASE=$SECONDS
PKGS=(vagrant vagrant-libvirt libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
      dnsmasq-base iptables qemu-utils qemu-system-x86 rsync openssh-client)
mapfile -t missing < <(for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || echo "$p"; done)
if [ ${#missing[@]} -gt 0 ]; then say "installing ${missing[*]}"; apt_install "${missing[@]}"; fi
pgrep -x libvirtd >/dev/null && die "a libvirtd runs already on this host: this check brings its own"
say "$(vagrant --version), vagrant-libvirt $(dpkg-query -W -f='${Version}' vagrant-libvirt), libvirt $(dpkg-query -W -f='${Version}' libvirt-daemon)"
phase packages

BOX="$(bash "$HERE/box.sh")"
phase "box (vagrant/box.sh)"
# KVM or TCG: what the VM rig found this host's /dev/kvm can do.
RIG="$(bash "$ZL_VM/image.sh" 6.1)"
boot_setup vagrant
boot_accel "$RIG"
EMULATE=""
[ "$BOOT_ACCEL_NAME" = kvm ] || EMULATE=1

RUN="zlvg-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
WORK="$(mktemp -d /var/tmp/zerolayer-vagrant.XXXXXX)"
MADE_DIRS=()
cleanup() {
    local pid
    if ip netns list | grep -qw "$RUN"; then
        for pid in $(ip netns pids "$RUN" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        sleep 0.5
        ip netns delete "$RUN" 2>/dev/null || true
    fi
    # What the run said, kept; the domains' disks, the box, the daemon's
    # state, all under WORK, removed.
    cp "$WORK"/*.log "$BOOT_LOGDIR/" 2>/dev/null || true
    cp -r "$WORK/libvirt/var/log/libvirt" "$BOOT_LOGDIR/libvirt" 2>/dev/null || true
    rm -rf --one-file-system "$WORK"
    for dir in "${MADE_DIRS[@]}"; do rmdir "$dir" 2>/dev/null || true; done
    left=""
    ip netns list | grep -qw "$RUN" && left+=" netns $RUN;"
    pgrep -f "$WORK" >/dev/null && left+=" processes of $WORK;"
    [ -e "$WORK" ] && left+=" $WORK;"
    if [ -n "$left" ]; then say "left behind:$left"; else say "nothing left behind"; fi
}
at_exit cleanup
# Mount points the inner bind mounts need, made empty and removed after.
for dir in /var/lib/libvirt /var/cache/libvirt /var/log/libvirt; do
    [ -d "$dir" ] || { mkdir -p "$dir"; MADE_DIRS+=("$dir"); }
done
ip netns add "$RUN"
ip -n "$RUN" link set lo up
say "run $RUN, the VM $([ -n "$EMULATE" ] && echo "emulated (TCG)" || echo "under KVM")"
# The Vagrantfile decides KVM or emulation itself, as for any user (it reads
# the probe above); the check only asserts that it said so.
ZEROLAYER_VAGRANT_BOX="zerolayer-local-$RUN" EMULATE="$EMULATE" BOX="$BOX" \
    ip netns exec "$RUN" unshare --mount --propagation private \
    bash "${BASH_SOURCE[0]}" --inner "$WORK"
say "vagrant check passed in $((SECONDS - START)) s"
