//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Executable mappings of a process as it exits, while its mm is whole, for
 * processes that appeared while spanprof ran (exec or fork). The exec event
 * lets user space place the executable and the loader of a process gone
 * before /proc/PID/maps could be read, but not what the loader maps next
 * (libc) nor the vDSO; a read of maps at the exec is too early to see them
 * either. This object is loaded on its own, after the sampler's, sharing its
 * ring buffer and pid filter: it needs the open-coded VMA iterator (Linux
 * 6.7), and a kernel without it keeps everything else.
 *
 * Where the capture runs:
 * - syscalls/sys_enter_exit_group: the usual end of a process (return from
 *   main, exit()); the task and its mm are whole on every kernel.
 * - tp_btf/sched_process_exit of the group's last thread: catches what
 *   exit_group does not (fatal signals, the last thread's exit()) on kernels
 *   that trace it before exit_mm (6.16 on); on older ones the mm is gone
 *   there and the exit is counted as missed.
 * The first to succeed clears the flag; a failure at exit_group (mmap lock
 * busy, ring full) leaves it for sched_process_exit, which counts the exit
 * as missed if it cannot capture it either. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "spanprof.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The ring and pid filter, replaced at load by the sampler's. */
#include "shared.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EXIT_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} exit_counters SEC(".maps");

/* Processes whose mappings are wanted at exit, by tgid: set at exec and
 * fork, cleared when the whole process has exited. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} exit_flags SEC(".maps");

/* A capture being built: the record, and the scan's state, kept in map
 * memory so the verifier sees the same state on every turn of the VMA
 * loop. */
struct maps_scratch {
	struct proc_maps r;
	__u64 prev_ino;
	__u32 prev_dev;
	__u32 scanned;
	/* Set while a capture uses this CPU's scratch: a syscall tracepoint
	 * may run preemptible (faultable since 6.14), and a second exit on
	 * the CPU must not write into the first's record. */
	__u32 busy;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct maps_scratch);
} maps_scratch SEC(".maps");

extern int bpf_iter_task_vma_new(struct bpf_iter_task_vma *it, struct task_struct *task, __u64 addr) __ksym;
extern struct vm_area_struct *bpf_iter_task_vma_next(struct bpf_iter_task_vma *it) __ksym;
extern void bpf_iter_task_vma_destroy(struct bpf_iter_task_vma *it) __ksym;

#define VM_EXEC_ 0x4
/* VMAs looked at per process, beyond any default vm.max_map_count (65530):
 * bounds the time of one exit. A scan cut there counts one dropped. */
#define MAX_SCAN 65536
/* Dentries and mount crossings followed up from a file. */
#define PATH_STEPS 16

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&exit_counters, &idx);
	if (v)
		*v += n;
}

static __always_inline void flag(__u32 tgid)
{
	__u8 one = 1;

	if (!wanted(tgid))
		return;
	if (bpf_map_update_elem(&exit_flags, &tgid, &one, BPF_ANY))
		count(EXIT_CNT_UNTRACKED, 1);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(flag_exec, struct task_struct *p)
{
	flag(bpf_get_current_pid_tgid() >> 32);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(flag_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 pid = child->pid, tgid = child->tgid;

	if (pid == tgid) /* a process, not a thread */
		flag(tgid);
	return 0;
}

/* One mapping, as read from its VMA. */
struct vma_info {
	__u64 start;
	__u64 end;
	__u64 pgoff;
	__u64 file;        /* struct file *, 0 for the vDSO */
	__u64 root_dentry; /* the process's root directory */
	__u64 root_mnt;
	__u64 exe_inode;   /* struct inode * of the executable */
};

/* put_name writes the path components of f leaf first from pos, while they
 * fit, and returns the bytes written; *full is set when they reach the
 * process's root (or the root of the mount tree). */
static __always_inline __u32 put_name(struct maps_scratch *sc, __u32 pos, struct file *f, struct vma_info *vi,
				      __u16 *full)
{
	struct dentry *d = BPF_CORE_READ(f, f_path.dentry), *parent;
	struct vfsmount *vm = BPF_CORE_READ(f, f_path.mnt);
	struct mount *m, *mp;
	__u32 start = pos, len;
	long n;

	for (int i = 0; i < PATH_STEPS; i++) {
		if ((__u64)d == vi->root_dentry && (__u64)vm == vi->root_mnt) {
			*full = PROC_VMA_PATH_FULL;
			break;
		}
		m = (void *)vm - bpf_core_field_offset(struct mount, mnt);
		if (d == BPF_CORE_READ(vm, mnt_root)) {
			/* Up through the mount point into the parent mount. */
			mp = BPF_CORE_READ(m, mnt_parent);
			if (mp == m) {
				*full = PROC_VMA_PATH_FULL; /* root of the mount tree */
				break;
			}
			d = BPF_CORE_READ(m, mnt_mountpoint);
			vm = (void *)mp + bpf_core_field_offset(struct mount, mnt);
			continue;
		}
		parent = BPF_CORE_READ(d, d_parent);
		len = BPF_CORE_READ(d, d_name.len);
		/* A root that is no mount's (a detached tree), a name too long
		 * for the record, or no room: the path stays partial. */
		if (parent == d || len == 0 || len >= PROC_VMA_NAME_MAX || pos + PROC_VMA_NAME_MAX > PROC_MAPS_DATA)
			break;
		n = bpf_probe_read_kernel_str(&sc->r.data[pos & (PROC_MAPS_DATA - 1)], PROC_VMA_NAME_MAX,
					      BPF_CORE_READ(d, d_name.name));
		if (n != len + 1)
			break; /* renamed under us */
		pos += n;
		d = parent;
	}
	return pos - start;
}

/* put_vma appends one mapping to the capture, or counts it dropped when the
 * record is full. Global, so verified once, not once per turn of the VMA
 * loop. */
__noinline int put_vma(struct maps_scratch *sc, struct vma_info *vi)
{
	struct proc_vma *v;
	struct file *f;
	__u32 pos, names = 0;
	__u16 full = 0;

	if (!sc || !vi)
		return 0;
	pos = sc->r.len;
	if (pos > PROC_MAPS_DATA - sizeof(*v)) {
		sc->r.dropped++;
		return 0;
	}
	v = (void *)&sc->r.data[pos & (PROC_MAPS_DATA - 1)];
	v->start = vi->start;
	v->end = vi->end;
	v->offset = vi->pgoff << 12;
	v->ino = 0;
	v->dev = 0;
	v->flags = 0;
	v->name_len = 0;
	pos += sizeof(*v);
	f = (struct file *)vi->file;
	if (!f) {
		v->flags = PROC_VMA_VDSO;
	} else {
		struct inode *inode = BPF_CORE_READ(f, f_inode);
		__u16 exe = (__u64)inode == vi->exe_inode ? PROC_VMA_EXE : 0;

		v->ino = BPF_CORE_READ(inode, i_ino);
		v->dev = BPF_CORE_READ(inode, i_sb, s_dev);
		if (v->ino == sc->prev_ino && v->dev == sc->prev_dev) {
			v->flags = PROC_VMA_SAME_FILE | exe;
		} else {
			names = put_name(sc, pos, f, vi, &full);
			v->flags = full | exe;
			v->name_len = names;
			names = (names + 7) & ~7U; /* the next entry is 8-byte aligned */
			sc->prev_ino = v->ino;
			sc->prev_dev = v->dev;
		}
	}
	sc->r.len = pos + names;
	sc->r.nr++;
	return 0;
}

/* capture sends the executable mappings of the current process, whose
 * group is exiting, and clears its flag; last is the final chance (the
 * group's last thread), where a failure is counted. Returns 0 on success. */
static __always_inline int capture(__u32 tgid, int last)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct bpf_iter_task_vma it;
	struct vm_area_struct *vma;
	struct maps_scratch *sc;
	struct vma_info vi = {};
	struct mm_struct *mm;
	__u64 vdso, size;
	__u32 zero = 0;
	int err = -1;

	mm = task->mm;
	sc = bpf_map_lookup_elem(&maps_scratch, &zero);
	if (!mm || !sc)
		goto out;
	if (__sync_lock_test_and_set(&sc->busy, 1))
		goto out;
	vdso = (__u64)BPF_CORE_READ(mm, context.vdso);
	vi.root_dentry = (__u64)BPF_CORE_READ(task, fs, root.dentry);
	vi.root_mnt = (__u64)BPF_CORE_READ(task, fs, root.mnt);
	vi.exe_inode = (__u64)BPF_CORE_READ(mm, exe_file, f_inode);
	sc->r.tag = REC_PROC_MAPS;
	sc->r.ktime_ns = bpf_ktime_get_ns();
	sc->r.pid = tgid;
	sc->r.nr = 0;
	sc->r.dropped = 0;
	sc->r.len = 0;
	sc->prev_ino = 0;
	sc->prev_dev = 0;
	sc->scanned = 0;
	/* Takes the mmap lock without waiting: -EBUSY when another thread of
	 * the process holds it. */
	if (bpf_iter_task_vma_new(&it, task, 0) == 0) {
		while ((vma = bpf_iter_task_vma_next(&it))) {
			if (++sc->scanned > MAX_SCAN) {
				sc->r.dropped++;
				break;
			}
			if (!(vma->vm_flags & VM_EXEC_))
				continue;
			vi.file = (__u64)vma->vm_file;
			if (!vi.file && vma->vm_start != vdso)
				continue; /* anonymous code (JIT): named by perf maps, not files */
			vi.start = vma->vm_start;
			vi.end = vma->vm_end;
			vi.pgoff = vma->vm_pgoff;
			put_vma(sc, &vi);
		}
		size = sc->r.len;
		if (size > PROC_MAPS_DATA)
			size = PROC_MAPS_DATA;
		/* No wake-up: nothing waits on it, unlike an exec. */
		err = bpf_ringbuf_output(&samples, &sc->r, __builtin_offsetof(struct proc_maps, data) + size,
					 BPF_RB_NO_WAKEUP);
		if (!err && sc->r.dropped)
			count(EXIT_CNT_VMAS_DROPPED, sc->r.dropped);
	}
	bpf_iter_task_vma_destroy(&it);
	sc->busy = 0;
out:
	if (!err || last) {
		bpf_map_delete_elem(&exit_flags, &tgid);
		if (err)
			count(EXIT_CNT_MISSED, 1);
	}
	return err;
}

SEC("tracepoint/syscalls/sys_enter_exit_group")
int capture_exit_group(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (bpf_map_lookup_elem(&exit_flags, &tgid))
		capture(tgid, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(capture_exit, struct task_struct *p)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	/* Only the group's last thread: live was decremented before the
	 * tracepoint on every kernel. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	if (bpf_map_lookup_elem(&exit_flags, &tgid))
		capture(tgid, 1);
	return 0;
}

/* Referenced so the types reach BTF and bpf2go can emit them for Go. */
const enum record_tag *unused_record_tag __attribute__((unused));
const enum exit_counter *unused_exit_counter __attribute__((unused));
const enum proc_vma_flag *unused_proc_vma_flag __attribute__((unused));
const struct proc_maps *unused_proc_maps __attribute__((unused));
const struct proc_vma *unused_proc_vma __attribute__((unused));
