/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What differs between x86_64 and arm64 where the programs touch registers
 * and the thread struct. Each macro is what the x86 code did before, so
 * the x86 hot path costs the same; the arm64 side has the same shape.
 *
 * The "mode" word of a register set tells user from kernel and 64-bit from
 * 32-bit code: cs on x86, pstate on arm64. Both keep 64-bit user frame
 * records as {saved frame pointer, return address} at the frame pointer
 * (rbp, x29), so the frame-pointer walk is common. */
#ifndef SPANPROF_ARCH_H
#define SPANPROF_ARCH_H

#if defined(__TARGET_ARCH_x86)

#define USER_CS_64 0x33 /* __USER_CS: a 64-bit user context */

/* The mode word of a perf_event context; the verifier allows only
 * whole-word loads of it. */
#define CTX_MODE(ctx) (*(volatile __u64 *)&(ctx)->regs.cs)
#define MODE_IS_USER(m) ((m) & 3)
#define MODE_USER_64(m) (((m) & 0xffff) == USER_CS_64)

/* Copies the user registers the stack walk and the leaf fix-up need from
 * r (struct pt_regs, also what a perf_event context holds). x86 keeps
 * return addresses on the stack: no link register. */
#define SET_USER_REGS(s, r)                                                                        \
	do {                                                                                       \
		(s)->user_ip = (r)->ip;                                                            \
		(s)->user_sp = (r)->sp;                                                            \
		(s)->user_bp = (r)->bp;                                                            \
	} while (0)
#define REGS_MODE(r) ((r)->cs)

/* The thread pointer user TLS hangs from, and where a glibc TCB keeps its
 * DTV pointer (TLS variant II: tcbhead_t {tcb, dtv, ...}). */
#define TASK_TP(task) BPF_CORE_READ(task, thread.fsbase)
#define TCB_DTV_OFF 8

#elif defined(__TARGET_ARCH_arm64)

#define PSR_MODE_MASK 0x0000000f
#define PSR_MODE32_BIT 0x00000010

/* EL0t is mode 0, and an AArch32 user task's mode (0x10) has the same low
 * bits. */
#define CTX_MODE(ctx) (*(volatile __u64 *)&(ctx)->regs.pstate)
#define MODE_IS_USER(m) (((m) & PSR_MODE_MASK) == 0)
#define MODE_USER_64(m) (!((m) & PSR_MODE32_BIT))

/* r is a struct user_pt_regs (perf_event context) or struct pt_regs, whose
 * first member has the same fields. A leaf function keeps its return
 * address in x30 and never stores it: user space needs the link register. */
#define SET_USER_REGS(s, r)                                                                        \
	do {                                                                                       \
		(s)->user_ip = (r)->pc;                                                            \
		(s)->user_sp = (r)->sp;                                                            \
		(s)->user_bp = (r)->regs[29];                                                      \
		(s)->user_lr = (r)->regs[30];                                                      \
	} while (0)
#define REGS_MODE(r) ((r)->pstate)

/* tpidr_el0, saved in the thread struct; glibc's aarch64 TLS is variant I:
 * tp points to the TCB {dtv, private}. */
#define TASK_TP(task) BPF_CORE_READ(task, thread.uw.tp_value)
#define TCB_DTV_OFF 0

/* The Go runtime keeps g in x28 on arm64, not in TLS. */
#define GO_G_REG 28

#else
#error "unsupported target architecture"
#endif

#endif
