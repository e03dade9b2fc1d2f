/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Stack windows: the bytes wanted per process and learned per
 * executable, which fill_user() copies. */
#ifndef WINDOWS_H
#define WINDOWS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "spanprof.h"
#include "lib/compat.h"

/* Window bytes wanted per process, by tgid, beyond the first chunk: written
 * by user space for processes whose stacks the window cut (a frameless
 * function with a large frame, such as vfprintf's), deleted at exit.
 * Absent: STACK_SNAP_BYTES. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} stack_windows SEC(".maps");

/* Window bytes for a process with no stack_windows entry yet: user space
 * that sizes each process's window from what its first samples needed
 * copies them with the widest window (STACK_WINDOW_MAX), so that a
 * process's first stacks through a large frameless frame are not cut
 * before it has a size; 0 keeps STACK_SNAP_BYTES. */
volatile const __u32 new_process_window = 0;

/* The file a process runs (mm->exe_file; a script's interpreter), as
 * the exec event names it (proc_lifecycle.exe_ino and exe_dev). */
struct exe_key {
	__u64 ino;
	__u32 dev; /* kernel dev_t: major << 20 | minor */
	__u32 pad;
};

/* The window bytes an executable's new processes get: for a sample whose
 * ip is in the executable's own code (mm->start_code to end_code), and
 * for one elsewhere (the dynamic loader as the process starts, the
 * libraries). The two differ most in short-lived processes: their loader
 * phase needs the widest window (its entry frames are large and have no
 * frame pointer) where their own code needs the first chunk only. 0: not
 * learned yet, new_process_window. */
struct exe_window {
	__u32 in_exe;
	__u32 other;
};

/* Window bytes for the processes of an executable that have no
 * stack_windows entry of their own (new ones: a fork, or an exec), written
 * by user space with the most any process of the file needed or was sized
 * to, for each kind of ip, so that short-lived processes of a file seen
 * before (a compiler, a health check) are not copied with
 * new_process_window. Least recently used files go first. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct exe_key);
	__type(value, struct exe_window);
} exe_windows SEC(".maps");

/* new_window returns the window bytes of the current task's process, which
 * has no stack_windows entry, for a sample at ip: its executable's
 * (exe_windows) for that kind of ip, or new_process_window for a file or
 * kind not sized yet. */
static __always_inline __u32 new_window(__u64 ip)
{
	struct task_struct *task = CURRENT_TASK();
	struct exe_key k = {};
	struct mm_struct *mm;
	struct super_block *sb;
	struct inode *ino;
	struct file *f;
	struct exe_window *w;
	__u32 bytes;

	mm = TREAD(task, mm);
	if (!mm)
		return new_process_window;
	f = TREAD(mm, exe_file);
	if (!f)
		return new_process_window;
	ino = TREAD(f, f_inode);
	k.ino = TREAD(ino, i_ino);
	sb = TREAD(ino, i_sb);
	k.dev = TREAD(sb, s_dev);
	w = bpf_map_lookup_elem(&exe_windows, &k);
	if (!w)
		return new_process_window;
	bytes = ip >= TREAD(mm, start_code) && ip < TREAD(mm, end_code) ? w->in_exe : w->other;
	return bytes ? bytes : new_process_window;
}

#endif
