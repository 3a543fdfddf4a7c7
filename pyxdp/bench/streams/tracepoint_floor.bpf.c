// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The floor under `zerolayer streams` on this machine, for the streams
 * section of `zerolayer bench` (pyxdp/bench/streams/loops.py): a program
 * that returns at once on each tracepoint bpf/streams.bpf.c uses (a test holds
 * the two lists equal). A syscall tracepoint, once anything is attached,
 * sends every system call of every process through the kernel's slow path;
 * what the observer costs beyond this is its own work. */
#include "zl_object.h"

char _license[] SEC("license") = "Dual BSD/GPL";

#define ZL_BARE(category, event)                                                                   \
	SEC("tracepoint/" #category "/" #event)                                                    \
	int zl_bare_##event(void *ctx)                                                             \
	{                                                                                          \
		return 0;                                                                          \
	}

ZL_BARE(syscalls, sys_enter_read)
ZL_BARE(syscalls, sys_exit_read)
ZL_BARE(syscalls, sys_enter_write)
ZL_BARE(syscalls, sys_exit_write)
ZL_BARE(syscalls, sys_enter_recvfrom)
ZL_BARE(syscalls, sys_exit_recvfrom)
ZL_BARE(syscalls, sys_enter_sendto)
ZL_BARE(syscalls, sys_exit_sendto)
ZL_BARE(syscalls, sys_enter_readv)
ZL_BARE(syscalls, sys_exit_readv)
ZL_BARE(syscalls, sys_enter_writev)
ZL_BARE(syscalls, sys_exit_writev)
ZL_BARE(syscalls, sys_enter_recvmsg)
ZL_BARE(syscalls, sys_exit_recvmsg)
ZL_BARE(syscalls, sys_enter_sendmsg)
ZL_BARE(syscalls, sys_exit_sendmsg)
ZL_BARE(syscalls, sys_enter_close)
ZL_BARE(sched, sched_process_exit)
