# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The VM rig's shared shell, sourced by image.sh, run.sh, matrix.sh,
# service/image.sh, service/suite.sh, .ci/run, the Makefile and
# ../provision.sh:
#   logging        say, die, usage, phase, need_root (log.sh)
#   clean-up       at_exit FUNCTION: run at exit, on every path (the traps
#                  are set here, once)
#   packages       apt_update, apt_install, need_tools
#   chroots        work_area, mount_at, chroot_mounts, unmount_all, inroot,
#                  services_off/on
#   kernels        kernel_names, kernel_row: vagrant/vm/kernels, the one list
#   guests         boot_setup, job_script, boot: the one qemu command line,
#                  the KVM probe, the job share, the serial console, the
#                  wait and the status
# Sourcing it defines these and the ZL_* paths below, and sets the traps.

ZL_VM="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ZL_REPO="$(cd "$ZL_VM/../.." && pwd)"
ZL_CACHE="${ZEROLAYER_VM_CACHE:-/var/cache/zerolayer/vm}"

# --- logging ---------------------------------------------------------------------
# shellcheck source=vagrant/vm/log.sh
. "$ZL_VM/log.sh"

# --- clean-up on every exit path --------------------------------------------------
ZL_AT_EXIT=()
at_exit() { ZL_AT_EXIT+=("$1"); }
zl_exit() {
    local i
    for ((i = ${#ZL_AT_EXIT[@]} - 1; i >= 0; i--)); do "${ZL_AT_EXIT[i]}" || true; done
    ZL_AT_EXIT=()
}
trap zl_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- packages -----------------------------------------------------------------------
ZL_APT_UPDATED=""
apt_update() { # once per run
    export DEBIAN_FRONTEND=noninteractive
    [ -n "$ZL_APT_UPDATED" ] || { apt-get update -q >&2; ZL_APT_UPDATED=1; }
}
apt_install() { apt_update; apt-get install -y -q --no-install-recommends "$@" >&2; }  # PACKAGE...
need_tools() { # COMMAND:PACKAGE[,PACKAGE...]...: install what the missing commands need
    local pair pkgs need=()
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null && continue
        IFS=, read -r -a pkgs <<<"${pair#*:}"
        need+=("${pkgs[@]}")
    done
    [ ${#need[@]} -gt 0 ] || return 0
    say "installing host tools: ${need[*]}"
    apt_install "${need[@]}"
}

# --- chroots and their mounts ----------------------------------------------------------
ZL_MOUNTS=() ZL_CHROOT=""
mount_at() { mount "$@"; ZL_MOUNTS+=("${@: -1}"); }  # ARGS... TARGET, undone by unmount_all
chroot_mounts() { # ROOT: what a chroot into ROOT needs of the host; inroot runs there
    ZL_CHROOT="$1"
    mount_at -t proc proc "$1/proc"
    mount_at -t sysfs sysfs "$1/sys"
    mount_at --bind /dev "$1/dev"
    mount_at --bind /dev/pts "$1/dev/pts"
    cp /etc/resolv.conf "$1/etc/resolv.conf"
}
unmount_all() { # [--force]: newest first; -d frees a loop device with its mount
    local i
    for ((i = ${#ZL_MOUNTS[@]} - 1; i >= 0; i--)); do
        if [ "${1:-}" = --force ]; then
            umount -d "${ZL_MOUNTS[i]}" 2>/dev/null || umount -l -d "${ZL_MOUNTS[i]}" 2>/dev/null || true
        else
            umount -d "${ZL_MOUNTS[i]}"
        fi
    done
    ZL_MOUNTS=()
}
ZL_WORK=""
work_area() { ZL_WORK="$1"; at_exit remove_work; }  # DIR: unmounted and deleted at exit
remove_work() {
    unmount_all --force
    # Never delete through a mount that is still there (/dev is the host's).
    if findmnt -rn -o TARGET | grep -q "^$ZL_WORK/"; then
        say "left $ZL_WORK in place: something is still mounted under it"
    else
        rm -rf --one-file-system "$ZL_WORK"
    fi
}
# A clean environment: the host's PIP_*, proxy and locale settings are not the
# guest's business.
inroot() { chroot "$ZL_CHROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
# Services must not start inside the chroot while packages install (haproxy would try).
services_off() {
    printf '#!/bin/sh\nexit 101\n' >"$ZL_CHROOT/usr/sbin/policy-rc.d"
    chmod +x "$ZL_CHROOT/usr/sbin/policy-rc.d"
}
services_on() { rm -f "$ZL_CHROOT/usr/sbin/policy-rc.d"; }
# What of this file goes into the images (image.sh's and service/image.sh's
# cache keys): an edit elsewhere here must not rebuild them.
image_helpers() { declare -f chroot_mounts inroot services_off services_on; }

# --- the kernels ---------------------------------------------------------------------------
ZL_KERNELS="$ZL_VM/kernels"
# shellcheck disable=SC2120  # .ci/run and the Makefile pass "ci"
kernel_names() { # [ci|hand]: the names in vagrant/vm/kernels, in its order
    awk -v where="${1:-}" '$1 !~ /^#/ && NF >= 4 && (where == "" || $4 == where) { print $1 }' "$ZL_KERNELS"
}
kernel_row() { # NAME: sets KERNEL_SUITE and KERNEL_KSUITE, or says what is listed
    local row
    row="$(awk -v k="$1" '$1 !~ /^#/ && NF >= 4 && $1 == k { print $2, $3; exit }' "$ZL_KERNELS")"
    if [ -z "$row" ]; then
        say "unknown kernel '$1': vagrant/vm/kernels lists $(kernel_names | paste -sd' ')"
        return 1
    fi
    # shellcheck disable=SC2034  # for the caller
    read -r KERNEL_SUITE KERNEL_KSUITE <<<"$row"
}

# --- guests -------------------------------------------------------------------------------
# The accelerator's one place. Under TCG the vCPUs take turns on one host
# thread (thread=single): under thread=multi the guests crashed now and then
# while patching their own code (docs/kernels.md has the measurement).
ZL_TCG_THREAD="${ZL_TCG_THREAD:-single}"
BOOT_ACCEL=() BOOT_ACCEL_NAME="" BOOT_PIDS=()
BOOT_WORK="" BOOT_JOB="" BOOT_LOGDIR=""

boot_setup() { # [PREFIX]: the run's logs (kept) and work area with the job share (removed at exit)
    local root="${ZEROLAYER_VM_LOGS:-/tmp/zerolayer-vm-logs}"
    # In /tmp anyone could have made it first: ours, a real directory,
    # writable by nobody else, or nothing is written through it.
    mkdir -p "$root"
    if [ -L "$root" ] || [ "$(stat -c %u "$root")" != "$(id -u)" ] \
        || [ -n "$(find "$root" -maxdepth 0 -perm /022)" ]; then
        die "$root is not a directory of ours that only we can write: remove it, or set ZEROLAYER_VM_LOGS"
    fi
    BOOT_LOGDIR="$root/${1:+$1-}$(date +%Y%m%d-%H%M%S)-$$"
    mkdir "$BOOT_LOGDIR"
    BOOT_WORK="$(mktemp -d /tmp/zerolayer-vm.XXXXXX)"
    BOOT_JOB="$BOOT_WORK/job"
    mkdir -p "$BOOT_JOB"
    at_exit boot_end
}
boot_end() {
    local pid
    for pid in "${BOOT_PIDS[@]}"; do stop_tree "$pid"; done
    BOOT_PIDS=()
    [ -f "$BOOT_JOB/output.log" ] && cp "$BOOT_JOB/output.log" "$BOOT_LOGDIR/output-interrupted.log"
    rm -rf "$BOOT_WORK"
    say "logs in $BOOT_LOGDIR"
}
forget_pid() { # PID: stopped or waited for already
    local pid kept=()
    for pid in "${BOOT_PIDS[@]}"; do [ "$pid" = "$1" ] || kept+=("$pid"); done
    BOOT_PIDS=("${kept[@]}")
}
stop_tree() { # PID: a background subshell and its children; returns when they are gone
    local kids kid
    mapfile -t kids < <(pgrep -P "$1" || true)
    kill "$1" "${kids[@]}" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    # qemu runs under timeout(1), which passes the signal on, then kills.
    for kid in "${kids[@]}"; do
        while kill -0 "$kid" 2>/dev/null; do sleep 0.2; done
    done
}
job_script() { # [--cd DIR] COMMAND [ARGS...]: the job.sh the guest runs; %q keeps each argument
    {
        if [ "$1" = --cd ]; then printf 'cd %q || exit 125\n' "$2"; shift 2; fi
        printf 'exec'; printf ' %q' "$@"; printf '\n'
    } >"$BOOT_JOB/job.sh"
}

# qemu in the background under timeout(1): qemu never outlives SECONDS (and
# KILL after 10 more), even if this script is killed -9. In a subshell whose
# stderr is qemu's log, so a qemu that aborts gets the shell's "Aborted"
# written there ("|| exit": no exec). Sets QEMU_PID (the subshell).
qemu_bg() { # SECONDS LOG QEMU-ARGS...
    local secs="$1" log="$2"
    shift 2
    ( timeout -k 10 "$secs" qemu-system-x86_64 -nodefaults -display none -monitor none -no-reboot "$@" \
        || exit ) </dev/null >"$log" 2>&1 &
    QEMU_PID=$!
    BOOT_PIDS+=("$QEMU_PID")
}
qemu_done() { # wait for QEMU_PID; sets QEMU_RC (124 or 137: timeout(1) ended it)
    QEMU_RC=0
    wait "$QEMU_PID" || QEMU_RC=$?
    forget_pid "$QEMU_PID"
}

# KVM when it really works. /dev/kvm can exist and still not run a stock
# kernel (a paravirtual "kvm-pvm" host does that: qemu aborts, or the boot
# hangs), so a short probe boot decides; its answer is kept for this host boot.
kvm_probe() { # IMAGE: prints "kvm|tcg REASON"
    local log="$BOOT_LOGDIR/probe-serial.log" t0=$SECONDS
    qemu_bg 40 "$BOOT_LOGDIR/probe-qemu.log" -accel kvm -cpu host -smp 1 -m 512 \
        -kernel "$1/vmlinuz" -initrd "$1/initrd.img" \
        -append "root=/dev/vda rw console=ttyS0 init=/sbin/zl-init quiet panic=1 zl.probe" \
        -drive "file=$1/rootfs.ext4,if=virtio,format=raw" -snapshot -serial "file:$log"
    while kill -0 "$QEMU_PID" 2>/dev/null && ! grep -qs zl-probe-ok "$log"; do sleep 0.1; done
    # Up: stop it. Else it ended by itself, and its status says how.
    if grep -qs zl-probe-ok "$log"; then stop_tree "$QEMU_PID"; fi
    qemu_done
    if grep -qs zl-probe-ok "$log"; then
        echo "kvm probe boot reached userspace in $((SECONDS - t0)) s"
    elif [ "$QEMU_RC" -eq 124 ] || [ "$QEMU_RC" -eq 137 ]; then
        echo "tcg kvm probe boot showed no sign of life in 40 s"
    else
        echo "tcg kvm probe boot failed: $(head -n 1 "$BOOT_LOGDIR/probe-qemu.log" 2>/dev/null)"
    fi
}
boot_accel() { # IMAGE: sets BOOT_ACCEL once per run, and says which and why
    [ -z "$BOOT_ACCEL_NAME" ] || return 0
    local why probe="$ZL_CACHE/accel-probe" boot_id
    case "${ZEROLAYER_VM_ACCEL:-}" in
        kvm|tcg) BOOT_ACCEL_NAME="$ZEROLAYER_VM_ACCEL" why="forced by ZEROLAYER_VM_ACCEL" ;;
        "")
            if [ ! -w /dev/kvm ]; then
                BOOT_ACCEL_NAME=tcg why="no usable /dev/kvm"
            else
                boot_id="$(cat /proc/sys/kernel/random/boot_id)"
                if [ "$(sed -n 1p "$probe" 2>/dev/null)" != "$boot_id" ]; then
                    say "probing KVM (at most once per host boot, up to 40 s)"
                    mkdir -p "$ZL_CACHE"
                    { echo "$boot_id"; kvm_probe "$1"; } >"$probe.tmp" && mv "$probe.tmp" "$probe"
                fi
                read -r BOOT_ACCEL_NAME why < <(sed -n 2p "$probe")
                why="$why (cached for this host boot in $probe)"
            fi ;;
        *) die "ZEROLAYER_VM_ACCEL must be tcg or kvm" ;;
    esac
    case "$ZL_TCG_THREAD" in single|multi) ;; *) die "ZL_TCG_THREAD must be single or multi" ;; esac
    if [ "$BOOT_ACCEL_NAME" = kvm ]; then
        BOOT_ACCEL=(-accel kvm -cpu host)
    else
        BOOT_ACCEL=(-accel "tcg,thread=$ZL_TCG_THREAD" -cpu max)
        why="$why; thread=$ZL_TCG_THREAD"
    fi
    say "accelerator $BOOT_ACCEL_NAME: $why"
}

# The guest kernel's own account of a crash on its console, from its first
# line (an oops header, "BUG:", a panic), 20 lines; nothing if there is none.
console_crash() { # SERIAL-LOG
    awk '!seen && /Kernel panic|Fatal exception|Oops|BUG:|: [0-9a-f]{4} \[#[0-9]+\]/ { seen = 1; n = 20 }
         n > 0 { print; n-- }' "$1" 2>/dev/null
}

# The status of the boot that just ended (see boot), and why when the guest
# gave none.
boot_status() { # TIMEOUT SERIAL-LOG QEMU-LOG
    local crash rc
    crash="$(console_crash "$2")"
    if [ -f "$BOOT_JOB/status" ]; then
        return "$(cat "$BOOT_JOB/status")"
    elif [ "$QEMU_RC" -eq 124 ] || [ "$QEMU_RC" -eq 137 ]; then
        say "timeout: the guest ran past $1 s; qemu was killed"
        rc=124
    elif [ -n "$crash" ]; then
        rc=123
    else
        say "qemu exited (status $QEMU_RC) before the job reported a status: $(tail -n 1 "$3" 2>/dev/null)"
        say "the serial console's last lines:"
        tail -n 15 "$2" 2>/dev/null | sed 's/^/    /' >&2 || true
        return 125
    fi
    if [ -n "$crash" ]; then
        say "PANIC: the guest kernel crashed; its console from the first line of it:"
        printf '%s\n' "$crash" | sed 's/^/    /' >&2
    fi
    return "$rc"
}

# Boot IMAGE (rootfs.ext4, vmlinuz, initrd.img) with the job share (BOOT_JOB,
# whose job.sh the guest's zl-init or zl-job runs), stream the job's output,
# and return its status: 124 on timeout, 123 when the guest kernel crashed
# (its first lines in the log), 125 when the guest reported no status for
# another reason (the console's last lines in the log).
#   --name N       the logs' suffix (serial-N.log ...), for several boots
#   --timeout S    from qemu's start, boot included (default 3600)
#   --mem MB       (default 4096)
#   --append ARGS  more kernel command line
#   --repo         share the repository in at its host path too
#   --overlay      boot from a qcow2 overlay kept for the run's next boot
#                  (default: -snapshot, nothing kept); never the image itself
# QEMU-ARGS: the NICs.
boot() { # [OPTIONS] IMAGE [-- QEMU-ARGS...]
    local name="" timeout=3600 mem=4096 append="" repo="" overlay="" image t0=$SECONDS epoch rc
    local drive shares serial suffix up=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --name) name="$2"; shift 2 ;;
            --timeout) timeout="$2"; shift 2 ;;
            --mem) mem="$2"; shift 2 ;;
            --append) append=" $2"; shift 2 ;;
            --repo) repo=1; shift ;;
            --overlay) overlay=1; shift ;;
            *) break ;;
        esac
    done
    image="$1"
    shift
    [ "${1:-}" != -- ] || shift
    boot_accel "$image"
    drive=(-drive "file=$image/rootfs.ext4,if=virtio,format=raw" -snapshot)
    if [ -n "$overlay" ]; then
        need_tools qemu-img:qemu-utils
        [ -f "$BOOT_WORK/disk.qcow2" ] \
            || qemu-img create -q -f qcow2 -F raw -b "$image/rootfs.ext4" "$BOOT_WORK/disk.qcow2"
        drive=(-drive "file=$BOOT_WORK/disk.qcow2,if=virtio,format=qcow2")
    fi
    shares=(-virtfs "local,path=$BOOT_JOB,mount_tag=job,security_model=none,id=job")
    if [ -n "$repo" ]; then
        # zl-init mounts it at this path: paths printed inside paste outside.
        echo "$ZL_REPO" >"$BOOT_JOB/repo-path"
        shares+=(-virtfs "local,path=$ZL_REPO,mount_tag=repo,security_model=none,id=repo")
    fi
    suffix="${name:+-$name}"
    serial="$BOOT_LOGDIR/serial$suffix.log"
    rm -f "$BOOT_JOB/status" "$BOOT_JOB/output.log" "$BOOT_JOB/kernel-release"
    epoch=$(date +%s)
    qemu_bg "$timeout" "$BOOT_LOGDIR/qemu$suffix.log" "${BOOT_ACCEL[@]}" -smp 2 -m "$mem" \
        -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
        -append "root=/dev/vda rw console=ttyS0 quiet panic=1$append" \
        "${drive[@]}" -device virtio-rng-pci "${shares[@]}" "$@" -serial "file:$serial"
    # The job's output as the guest writes it (the guest mounts the job share
    # cache=none, so writes land here at once).
    ( while [ ! -e "$BOOT_JOB/output.log" ]; do kill -0 "$QEMU_PID" 2>/dev/null || exit 0; sleep 0.2; done
      exec tail -n +1 -s 0.2 -f --pid="$QEMU_PID" "$BOOT_JOB/output.log" ) &
    BOOT_PIDS+=("$!")
    local tail_pid=$!
    qemu_done
    wait "$tail_pid" 2>/dev/null || true
    forget_pid "$tail_pid"
    [ -f "$BOOT_JOB/output.log" ] && mv "$BOOT_JOB/output.log" "$BOOT_LOGDIR/output$suffix.log"
    # zl-init writes kernel-release just before the job starts.
    [ -f "$BOOT_JOB/kernel-release" ] && up=$(( $(stat -c %Y "$BOOT_JOB/kernel-release") - epoch ))
    rc=0
    boot_status "$timeout" "$serial" "$BOOT_LOGDIR/qemu$suffix.log" || rc=$?
    say "boot${name:+ $name}: status $rc after $((SECONDS - t0)) s (${up:+guest up after $up s, }accel $BOOT_ACCEL_NAME), serial log $serial"
    return "$rc"
}
