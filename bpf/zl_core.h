/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The kernel structs bpf/streams.bpf.c reads, declared with only the fields it
 * reads, for CO-RE: clang records each access by field name in the
 * object's BTF, and libbpf moves it to where the running kernel's BTF
 * (/sys/kernel/btf/vmlinux) has that field. So one object, built once,
 * runs on every kernel with BTF, whatever its configuration; no kernel
 * header is read. A struct name with a ___suffix is another shape of the
 * same struct (libbpf drops the suffix when it matches).
 *
 * Also the contexts the programs get: a syscall tracepoint's record and a
 * uprobe's registers. */
#ifndef ZL_CORE_H
#define ZL_CORE_H

#include "zl_object.h"

#define ZL_CORE __attribute__((preserve_access_index))

/* Reads FIELD of the kernel object at PTR into DST, at the running
 * kernel's offset: 0, or a negative error (DST untouched) when PTR is NULL
 * or unreadable. */
#define ZL_CORE_READ(dst, ptr, field)                                         \
	bpf_probe_read_kernel(&(dst), sizeof(dst),                            \
			      __builtin_preserve_access_index(&(ptr)->field))
/* The address of FIELD of the kernel object at PTR, in the running kernel. */
#define ZL_CORE_AT(ptr, field) __builtin_preserve_access_index(&(ptr)->field)
/* Whether the running kernel's struct has FIELD (a constant libbpf sets). */
#define ZL_CORE_HAS(ptr, field) __builtin_preserve_field_info((ptr)->field, 2 /* exists */)

struct zl_core_counter {
	long counter;
};

struct zl_core_int_counter {
	int counter;
};

struct inode {
	unsigned short i_mode;
	unsigned long i_ino;
} ZL_CORE;

/* Linux 6.13 made a file's reference count a file_ref_t (f_ref), whose
 * count is one less than the references, from an atomic_long_t f_count. */
struct file {
	struct inode *f_inode;
	void *private_data;
	struct zl_core_counter f_count;
} ZL_CORE;

struct file___ref {
	struct {
		struct zl_core_counter refcnt;
	} f_ref;
} ZL_CORE;

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} ZL_CORE;

struct files_struct {
	struct fdtable *fdt;
} ZL_CORE;

struct signal_struct {
	struct zl_core_int_counter live;
} ZL_CORE;

struct task_struct {
	int tgid;
	struct task_struct *group_leader;
	char comm[16];
	struct files_struct *files;
	struct signal_struct *signal;
} ZL_CORE;

struct zl_core_in6 {
	__u8 bytes[16];
};

/* The kernel's are inside anonymous unions: libbpf looks into them. */
struct sock_common {
	__u32 skc_daddr;
	__u32 skc_rcv_saddr;
	__u16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	struct zl_core_in6 skc_v6_daddr;
	struct zl_core_in6 skc_v6_rcv_saddr;
} ZL_CORE;

struct sock {
	struct sock_common __sk_common;
} ZL_CORE;

struct socket {
	short type;
	struct sock *sk;
} ZL_CORE;

/* A syscall tracepoint's record (tracefs events/syscalls/<event>/format):
 * the common fields, the syscall's number, then each argument, or the
 * return value, in 8 bytes. */
struct zl_sys_enter {
	__u64 common;
	__s64 nr;
	__u64 args[6];
};

struct zl_sys_exit {
	__u64 common;
	__s64 nr;
	__s64 ret;
};

/* A uprobe's registers (struct pt_regs), by the loader's ZL_ARCH_<machine>,
 * and where a C function's arguments and result are. */
#if defined(ZL_ARCH_x86_64)
struct zl_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di;
	__u64 orig_ax, ip, cs, flags, sp, ss;
};
#define ZL_ARG1(r) ((r)->di)
#define ZL_ARG2(r) ((r)->si)
#define ZL_ARG4(r) ((r)->cx)
#define ZL_RET(r) ((r)->ax)
#elif defined(ZL_ARCH_aarch64)
struct zl_regs {
	__u64 regs[31];
	__u64 sp, pc, pstate;
};
#define ZL_ARG1(r) ((r)->regs[0])
#define ZL_ARG2(r) ((r)->regs[1])
#define ZL_ARG4(r) ((r)->regs[3])
#define ZL_RET(r) ((r)->regs[0])
#else
#error "the loader names the machine (ZL_ARCH_x86_64 or ZL_ARCH_aarch64)"
#endif

#endif
