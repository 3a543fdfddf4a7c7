/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The shared headers name uapi headers as a kernel tree has them;
 * plain clang (zl_object.h) takes the same one from linux-libc-dev. */
#include <linux/udp.h>
