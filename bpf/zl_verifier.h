/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Code shapes that older verifiers (Debian 12's 6.1 is the oldest checked)
 * accept. Their range tracking loses what newer kernels keep: the range of a
 * byte-swapped or negated value, and anything spilled without a range. clang
 * does not know that, so it drops masks it proves redundant and rewrites loop
 * counters; a few instructions of asm it cannot see through put them back. */
#ifndef ZL_VERIFIER_H
#define ZL_VERIFIER_H

/* clang can no longer reason about X: it keeps every mask and comparison
 * written against it, and cannot turn a loop counter into a negated
 * count-down (6.1 forgets a negated value's range, so it cannot tell that
 * the loop ends). Costs no instruction. */
#define zl_opaque(x) asm volatile("" : "+r"(x))

/* V, with the verifier told it is below 64 KiB: one AND that clang cannot
 * drop, so the bound exists before any spill. Use it on a byte-swapped
 * 16-bit field before it reaches pointer arithmetic. */
static __always_inline __u64 zl_bound16(__u64 v)
{
	asm volatile("%0 &= 0xffff" : "+r"(v));
	return v;
}

/* V & MASK (a constant), an AND clang cannot drop as redundant: for an
 * index clang has proved in range where the verifier has not. */
#define zl_bound(v, mask) ({ __u64 __v = (v); asm volatile("%0 &= %1" : "+r"(__v) : "i"(mask)); __v; })

/* V, at most MAX (a power of two), for a helper's size argument. 5.10 can
 * reach the clamp on a path whose bounds contradict each other, which it
 * does not prune, and loses V's sign there ("R2 min value is negative");
 * an AND that changes nothing gives the sign back, a second clamp the
 * bound. */
#define zl_at_most(v, max) ({ __u64 __w = (v); zl_opaque(__w); if (__w > (max)) __w = (max); \
	__w = zl_bound(__w, 2 * (max) - 1); if (__w > (max)) __w = (max); __w; })

#endif
