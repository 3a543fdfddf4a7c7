/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The shared headers name uapi headers as bcc finds them in a kernel tree;
 * plain clang (zl_object.h) takes the same one from linux-libc-dev. */
#include <linux/ipv6.h>
