/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Process events: the records of exec, exit, fork and link-map changes
 * the lifecycle programs write. */
#ifndef SPANPROF_LIB_PROCEVENTS_H
#define SPANPROF_LIB_PROCEVENTS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "spanprof.h"
#include "lib/maps.h"

static __always_inline struct proc_lifecycle *proc_event_reserve(__u32 pid, __u32 kind)
{
	struct proc_lifecycle *e;

	/* Same ring as the samples, so user space sees exec and exit in order
	 * with the samples around them; the tag tells them apart. */
	e = bpf_ringbuf_reserve(&samples, sizeof(*e), 0);
	if (!e) {
		count(CNT_PROC_EVENTS_LOST);
		return 0;
	}
	e->tag = REC_PROC_EVENT;
	e->ktime_ns = bpf_ktime_get_ns();
	e->pid = pid;
	e->kind = kind;
	e->entry = 0;
	e->interp_base = 0;
	e->exe_ino = 0;
	e->exe_dev = 0;
	e->path_len = 0;
	e->interp_ino = 0;
	e->interp_dev = 0;
	e->parent = 0;
	e->exec_mm = 0;
	e->pad = 0;
	return e;
}

struct file_id {
	__u64 ino;
	__u32 dev;
};

#ifndef SPANPROF_COMPAT /* bpf_find_vma: 5.17 */
/* interp_file records the file of the mapping at the interpreter's base. */
static long interp_file(struct task_struct *task, struct vm_area_struct *vma, void *ctx)
{
	struct file_id *id = ctx;
	struct file *f = vma->vm_file;

	if (f) {
		id->ino = f->f_inode->i_ino;
		id->dev = f->f_inode->i_sb->s_dev;
	}
	return 0;
}
#endif

/* Whether an exec wakes the reader at once, so that a short-lived process
 * is read from /proc before it is gone. User space clears it once the
 * exit-maps programs run (bpf/exitmaps.bpf.c): they capture the mappings of
 * every process that exits before the reader gets to it, and the exec then
 * waits for the reader's next poll like a sample, which spares a reader
 * wake-up and a /proc read per short-lived process. */
volatile __u8 exec_wakeup = 1;

static __always_inline void proc_event_submit(struct proc_lifecycle *e)
{
	/* An exit waits for the next poll: nothing needs it sooner. */
	bpf_ringbuf_submit(e, e->kind == PROC_EXEC && exec_wakeup ? BPF_RB_FORCE_WAKEUP : wakeup_flags());
}

#define AT_BASE_ 7
#define AT_ENTRY_ 9
/* Pairs of the auxiliary vector looked at, beyond any kernel's
 * AT_VECTOR_SIZE / 2 (27 on x86_64 6.1, 29 from 6.4 on). */
#define AUXV_MAX_PAIRS 32

#endif
