#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build (once) and print the path of a local libvirt box for the Vagrantfile,
# made of Debian 12's packages as debian/bookworm64 is: the VM rig's Debian
# 12 image (vagrant/vm/image.sh 6.1: Debian's kernel, provision.sh's packages
# and the venv already in it, since the check's guest reaches no mirror),
# plus systemd, sshd, sudo, rsync and the vagrant user with Vagrant's
# insecure key. Cached under ${ZEROLAYER_VM_CACHE:-/var/cache/zerolayer/vm}/
# vagrant-box/, keyed on the rig image and this script. Run it as root.
#
# The box boots its kernel directly (its own Vagrantfile names vmlinuz and
# initrd.img beside the disk), as the rig does: the disk is one ext4 file
# system with no partition table and no boot loader.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ZL_ME=vagrant/box.sh
# shellcheck source=vagrant/vm/lib.sh
. "$HERE/vm/lib.sh"
need_root "chroot and loop mounts need it"
# The image is mounted in a mount namespace of this script's own: a
# namespace another process makes meanwhile (any `ip netns exec`) would
# otherwise copy the mount, keep the file system open past the unmount
# here, and the box would be taken of a file system not yet written back.
if [ -z "${ZL_BOX_PRIVATE:-}" ]; then
    ZL_BOX_PRIVATE=1 exec unshare --mount --propagation private bash "${BASH_SOURCE[0]}" "$@"
fi
KERNEL=6.1   # Debian 12's userspace and kernel (vagrant/vm/kernels)
OUT="$ZL_CACHE/vagrant-box"
need_tools qemu-img:qemu-utils
RIG="$(bash "$ZL_VM/image.sh" "$KERNEL")"
KEY="$( { cat "$RIG/inputs.sha256" "$RIG/kernel-index" "${BASH_SOURCE[0]}"; image_helpers; } |
        sha256sum | cut -d' ' -f1)"
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9
if [ "$(cat "$OUT/key" 2>/dev/null)" = "$KEY" ] && [ -f "$OUT/zerolayer-local.box" ]; then
    say "reusing cached box $OUT/zerolayer-local.box"
    echo "$OUT/zerolayer-local.box"
    exit 0
fi
# Vagrant's insecure public key, as the vagrant package ships it: what
# `vagrant up` logs in with first (and replaces, as with any public box).
INSECURE="$(find /usr/share/rubygems-integration /usr/lib/ruby -path '*/vagrant-*/keys/vagrant.pub' 2>/dev/null | head -n 1)"
[ -n "$INSECURE" ] || die "found no Vagrant insecure key (apt-get install vagrant)"
WORK="$(mktemp -d "$OUT/.build.XXXXXX")"
MNT="$WORK/mnt"
work_area "$WORK"
ZL_PHASE=$SECONDS

cp --sparse=always "$RIG/rootfs.ext4" "$WORK/root.ext4"
# Room for the synced tree, its install and the tests' files.
truncate -s +3G "$WORK/root.ext4"
e2fsck -fy "$WORK/root.ext4" >/dev/null || [ $? -le 1 ]
resize2fs -f "$WORK/root.ext4" >/dev/null 2>&1
mkdir -p "$MNT"
mount_at -o loop "$WORK/root.ext4" "$MNT"
chroot_mounts "$MNT"
mount_at -t tmpfs tmpfs "$MNT/run"
mount_at -t tmpfs tmpfs "$MNT/tmp"
services_off
inroot apt-get update -q >&2
# man-db and bash-completion: what provision.sh installs besides the rig's
# packages (the check's guest reaches no mirror).
inroot apt-get install -y -q --no-install-recommends systemd-sysv udev dbus openssh-server \
    sudo rsync man-db bash-completion >&2
inroot apt-get clean
services_on
# What a box owes Vagrant: the vagrant user, sudo without a password, the
# insecure key, sshd that answers fast (no DNS lookups of the client).
inroot useradd --create-home --shell /bin/bash vagrant 2>/dev/null || true
VUID="$(inroot id -u vagrant)" VGID="$(inroot id -g vagrant)"
install -d -m 0700 -o "$VUID" -g "$VGID" "$MNT/home/vagrant/.ssh"
install -m 0600 -o "$VUID" -g "$VGID" "$INSECURE" "$MNT/home/vagrant/.ssh/authorized_keys"
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >"$MNT/etc/sudoers.d/vagrant"
chmod 0440 "$MNT/etc/sudoers.d/vagrant"
echo 'UseDNS no' >"$MNT/etc/ssh/sshd_config.d/vagrant.conf"
# Host keys made at the first boot, not baked in: every VM of the box its own.
rm -f "$MNT"/etc/ssh/ssh_host_*
mkdir -p "$MNT/etc/systemd/system/ssh.service.d"
# (Debian's unit checks the configuration first, which fails with no keys:
# its ExecStartPre is reset, the keys made, then the check.)
printf '[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' \
    >"$MNT/etc/systemd/system/ssh.service.d/keys.conf"
# DHCP on the first NIC (net.ifnames=0 on the command line: eth0).
printf '[Match]\nName=eth0\n\n[Network]\nDHCP=ipv4\n' >"$MNT/etc/systemd/network/eth0.network"
inroot systemctl enable systemd-networkd ssh >/dev/null 2>&1
# A short TCG boot: nothing starts that a Vagrant run does not need.
inroot systemctl mask haproxy.service apt-daily.timer apt-daily-upgrade.timer \
    e2scrub_all.timer e2scrub_reap.service fstrim.timer man-db.timer \
    systemd-timesyncd.service >/dev/null 2>&1
echo zerolayer-box >"$MNT/etc/hostname"
echo '/dev/vda / ext4 defaults 0 1' >"$MNT/etc/fstab"
unmount_all
# Clean, or the box would boot a file system needing recovery.
e2fsck -fn "$WORK/root.ext4" >/dev/null 2>&1 || die "the box's file system is not clean after its unmount"
phase "box image"

mkdir -p "$WORK/box"
qemu-img convert -O qcow2 "$WORK/root.ext4" "$WORK/box/box.img"
cp "$RIG/vmlinuz" "$RIG/initrd.img" "$WORK/box/"
SIZE_GB=$(( ($(stat -c %s "$WORK/root.ext4") + (1 << 30) - 1) >> 30 ))
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$SIZE_GB" \
    >"$WORK/box/metadata.json"
# The box's own Vagrantfile: its kernel and initrd sit beside its disk.
cat >"$WORK/box/Vagrantfile" <<'EOF'
# The zerolayer check's local box (vagrant/box.sh): Debian 12, booted
# straight into its kernel.
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.kernel = File.join(File.dirname(__FILE__), "vmlinuz")
    lv.initrd = File.join(File.dirname(__FILE__), "initrd.img")
    lv.cmd_line = "root=/dev/vda rw console=ttyS0 net.ifnames=0"
  end
end
EOF
# Not compressed: the qcow2 is compact already, and vagrant box add unpacks it at once.
tar -C "$WORK/box" -cf "$WORK/zerolayer-local.box" metadata.json Vagrantfile box.img vmlinuz initrd.img
mv "$WORK/zerolayer-local.box" "$OUT/zerolayer-local.box"
echo "$KEY" >"$OUT/key"
phase "box archive"
echo "$OUT/zerolayer-local.box"
