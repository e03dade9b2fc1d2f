/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Shared definitions between the eBPF programs and the Go agent. Go gets
 * these structs through bpf2go -type; never copy them by hand. */
#ifndef SPANPROF_H
#define SPANPROF_H

#include "vmlinux.h"

#define MAX_USER_FRAMES 127
#define MAX_KERN_FRAMES 64
/* The window: bytes of the user stack from the stack pointer sent with
 * every sample, in which user space unwinds frames without a frame pointer
 * by their CFA rules (internal/unwind, docs/unwinding.md). Every sample
 * carries the first chunk the frame-pointer walk reads anyway
 * (STACK_SNAP_BYTES in sampler.bpf.c), read straight into the record; a
 * process whose stacks were cut by the window gets a larger one, up to
 * STACK_WINDOW_MAX, from user space (map stack_windows). */
#define STACK_WINDOW_MAX 8192
#define TASK_COMM_LEN 16

enum sample_kind {
	SAMPLE_ON_CPU = 0,
	SAMPLE_OFF_CPU = 1,
};

/* Bits of stack_sample.flags. */
enum sample_flag {
	/* Taken inside execve before the new image's registers were set:
	 * the user registers and stack are the image the process ran before
	 * the exec (for a vfork or posix_spawn child, its parent's). */
	SAMPLE_PRE_EXEC = 1,
	/* Taken inside execve after the new image's registers were set: the
	 * sample is the new image's, which user space learns from the exec
	 * event (the one with the same exec_mm), maybe after it in the ring. */
	SAMPLE_NEW_IMAGE = 2,
};

/* Where the trace context of a sample came from. */
enum ctx_source {
	CTX_NONE = 0,
	CTX_THREAD = 1,       /* OTEP 4947 TLS record */
	CTX_GO_LABELS = 2,    /* goroutine pprof labels */
	CTX_TASK_STORAGE = 3, /* task_trace_context map */
	CTX_OTEL_MAP = 4,     /* OTel eBPF Instrumentation traces_ctx_v1 */
	CTX_NODE = 5,         /* Node.js otel_thread_ctx_nodejs_v1 walk (bpf/lib/nodectx.h) */
	CTX_ELASTIC = 6,      /* Elastic APM elastic_apm_profiling_correlation_tls_v1 (bpf/lib/elastic.h) */
};

/* Indices of the per-CPU drop and error counters. Every lost sample or
 * failed read lands in exactly one of them. */
enum drop_counter {
	CNT_SAMPLES = 0,
	CNT_RINGBUF_FULL = 1,
	CNT_USTACK_ERR = 2,
	CNT_KSTACK_ERR = 3,
	CNT_STACK_TOP_ERR = 4,
	CNT_CTX_READ_ERR = 5,
	CNT_FILTERED = 6,
	CNT_PROC_EVENTS_LOST = 7,
	CNT_CTX_INVALID = 8,    /* thread context record present but not valid */
	CNT_GO_LABELS_ERR = 9,  /* goroutine labels unreadable or malformed */
	CNT_CTX_ATTRS_ERR = 10, /* thread context attributes unreadable: sent without them */
	CNT_NODE_CTX_ERR = 11,  /* Node.js context walk failed a step (bpf/lib/nodectx.h): no context */
	/* Off-CPU (bpf/lib/offcpu.h); 12 up so on-CPU additions keep 10-11. */
	CNT_OFFCPU_SAMPLES = 12,      /* waits captured at switch-out */
	CNT_OFFCPU_PENDING_FULL = 13, /* capture dropped: offcpu_pending full */
	CNT_OFFCPU_STATE_ERR = 14,    /* no task storage for the thread's clock */
	CNT_TASK_HASH_FULL = 15,      /* compat object (Linux 5.10): a per-thread hash was full */
	CNT_MAX = 16,
};

/* The trace context other programs may publish for a task (SPEC: BPF task
 * storage, pinned at /sys/fs/bpf/spanprof/task_trace_context). */
struct trace_context {
	__u8 trace_id[16];
	__u8 span_id[8];
	__u64 start_ktime_ns;
};

enum tls_kind {
	TLS_NONE = 0,
	TLS_STATIC_TP = 1, /* variable at tp + tls_offset (tp: fsbase, tpidr_el0) */
	TLS_DTV = 2,       /* dtv = *(tp+8) on x86, *(tp) on arm64; block = dtv[module].val; var at block + tls_offset */
	TLS_DTV_MUSL = 3,  /* musl, x86-64: dtv = *(tp+8); dtv[0] = slots; block = dtv[module] (8-byte entries) */
};

enum go_label_layout {
	GO_LABELS_NONE = 0,
	GO_LABELS_MAP = 1,   /* Go <= 1.23: labels point to a map[string]string */
	GO_LABELS_SLICE = 2, /* Go >= 1.24: labels point to a []label{key, value string} */
};

/* Where the Node.js writer's discovery struct otel_thread_ctx_nodejs_v1
 * lives and the V8 layout the walk from it takes (bpf/lib/nodectx.h);
 * tls_kind TLS_NONE: not a Node.js writer. */
struct node_ctx_config {
	__u8 tls_kind;        /* enum tls_kind (glibc only) */
	__u8 pad0[3];
	__u32 wrapped_off;    /* embedder field 0 in an API object */
	__s64 tls_offset;
	__u64 tls_module;
	__u32 map_table_off;  /* JSCollection::table */
	__s32 record_slot;    /* -1: the embedder field points at the record */
};

/* Per-process instructions for finding the trace context, written by the
 * agent after it inspected the process's binaries. */
struct proc_config {
	__u8 tls_kind;      /* enum tls_kind */
	__u8 go_layout;     /* enum go_label_layout */
	__u16 pad0;
	__u32 pad1;
	__s64 tls_offset;
	__u64 tls_module;
	/* Go runtime: g at fsbase + go_tls_g on x86, in x28 on arm64, then g.m, m.curg,
	 * curg.labels. On-CPU samples of a thread in the scheduler (m.curg
	 * nil) take the goroutine locked to the thread, m.lockedg, instead;
	 * 0 when its offset is unknown (offset 0 of runtime.m is g0). */
	__s64 go_tls_g;
	__u32 go_off_m;
	__u32 go_off_curg;
	__u32 go_off_labels;
	__u32 go_off_lockedg;
	struct node_ctx_config node;
	/* Elastic APM's elastic_apm_profiling_correlation_tls_v1, located
	 * like the thread context (enum tls_kind); TLS_NONE when absent. */
	__u8 elastic_kind;
	__u8 pad2[7];
	__s64 elastic_offset;
	__u64 elastic_module;
};

/* OTEP 4947: the whole record is at most 640 bytes, 28 of them header. */
#define OTEL_CTX_MAX_ATTRS (640 - 28)

/* Words after the frames of a sample that hold its record's attributes. */
#define CTX_ATTR_WORDS ((OTEL_CTX_MAX_ATTRS + 7) / 8)

/* OTEP 4947 thread-context record header (packed, 2-byte aligned). */
struct otel_thread_ctx_hdr {
	__u8 trace_id[16];
	__u8 span_id[8];
	__u8 valid;
	__u8 trace_flags;
	__u16 attrs_data_size;
};

/* One event from the kernel: an on-CPU tick or an off-CPU interval. */
struct stack_sample {
	__u64 ktime_ns;     /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	/* CLOCK_TAI at the same instant (bpf_ktime_get_tai_ns, Linux 6.1),
	 * which a step of the wall clock moves with CLOCK_REALTIME, so that
	 * user space stamps the sample with the wall-clock time it was taken
	 * at, whenever it reads it; 0 without the helper. */
	__u64 tai_ns;
	__u64 value;        /* 1 for on-CPU, ns blocked for off-CPU */
	__u32 pid;          /* thread group id */
	__u32 tid;
	__u32 cpu;
	__u8 kind;          /* enum sample_kind */
	__u8 ctx_source;    /* enum ctx_source */
	__u8 state;         /* off-CPU: 'S' or 'D' */
	__u8 flags;         /* enum sample_flag */
	char comm[TASK_COMM_LEN];
	__u8 trace_id[16];
	__u8 span_id[8];
	/* User registers at the sample, for the leaf fix-up. */
	__u64 user_ip;
	__u64 user_sp;
	__u64 user_bp;
	__u64 user_lr;      /* arm64: x30, the leaf's return address; 0 on x86 */
	__s32 user_frames;  /* count, or negative errno */
	__s32 kern_frames;  /* count, or negative errno */
	__u32 window_len;   /* bytes of window in data, a multiple of 8 */
	__u32 parent_pid;   /* SAMPLE_PRE_EXEC: the parent's tgid, 0 otherwise */
	/* CTX_THREAD: the user address of the thread-context record, whose
	 * attributes are copied after the stacks are walked; CTX_ELASTIC: the
	 * local root span id (8 bytes as published); 0 otherwise. */
	__u64 ctx_record;
	__u16 attrs_len;    /* bytes of the record's attributes in data, after the frames */
	__u16 pad2;
	__u32 exec_mm;      /* SAMPLE_NEW_IMAGE: the new mm's address, low 32 bits */
	/* The window (user memory at [user_sp, user_sp + window_len)), then
	 * user_frames user addresses, then kern_frames kernel addresses, then
	 * attrs_len bytes of attributes padded to 8. The record sent is cut
	 * after the last one used: writing the whole struct into the ring
	 * cost more than the stack walks. */
	__u64 data[STACK_WINDOW_MAX / 8 + MAX_USER_FRAMES + MAX_KERN_FRAMES + CTX_ATTR_WORDS];
};

/* Off-CPU sampling clock of one thread (task storage): the time of its
 * previous blocking switch-out, which sets the probability of capturing the
 * next one (see bpf/lib/offcpu.h). */
struct offcpu_thread {
	__u64 last_out; /* run-queue clock (offcpu_clock), only for the cycle */
	__u8 pending;   /* a capture waits in offcpu_pending */
	__u8 pad[7];
};

/* A wait captured at switch-out, completed and emitted at switch-in. */
struct offcpu_pending {
	/* Time since the thread's previous blocking switch-out, capped at the
	 * threshold: the wait was captured with probability
	 * cycle_ns / offcpu_threshold_ns. */
	__u64 cycle_ns;
	__u64 size; /* bytes of s to send */
	struct stack_sample s;
};

enum proc_event_kind {
	PROC_EXEC = 1,
	PROC_EXIT = 2,
	PROC_FORK = 3, /* a new process (not a thread); parent is set */
	/* The dynamic loader changed the process's link map (dlopen, dlclose):
	 * its debugger hook _dl_debug_state ran. Only pid is set. */
	PROC_LINKMAP = 4,
};

#define EXEC_PATH_LEN 256

/* Process lifecycle, so mappings are read at exec and kept after exit. An
 * exec also says where the new image lies, for processes gone before
 * /proc/PID/maps can be read: user space lays the executable's and the
 * interpreter's segments out from their ELF headers. Tagged (enum
 * record_tag): a sample record cut after its frames can have any size
 * from its header on, this one's too. */
struct proc_lifecycle {
	__u64 tag; /* REC_PROC_EVENT */
	__u64 ktime_ns;
	__u32 pid;
	__u32 kind;        /* enum proc_event_kind */
	__u64 entry;       /* AT_ENTRY: load bias of the executable + e_entry */
	__u64 interp_base; /* AT_BASE: load bias of the interpreter, 0 without */
	__u64 exe_ino;     /* the file executed (the interpreter of a script) */
	__u32 exe_dev;     /* kernel dev_t: major << 20 | minor */
	__u32 path_len;    /* bytes of path with its NUL, 0 when unread */
	__u64 interp_ino;  /* the file mapped at interp_base, 0 when unknown */
	__u32 interp_dev;
	__u32 parent;  /* a fork's forking process (tgid), 0 otherwise */
	__u32 exec_mm; /* an exec's new mm's address, low 32 bits */
	__u32 pad;
	char path[EXEC_PATH_LEN];
};

/* Mappings captured as a process exits (bpf/exitmaps.bpf.c), for processes
 * that appeared (exec, fork) while spanprof ran: /proc/PID/maps read at the
 * exec shows only the executable, the loader and the vDSO, and a process
 * living a millisecond is gone before anything else can be read.
 *
 * Records other than stack_sample start with a tag whose top bit is set.
 * A sample starts with ktime_ns, which never has it (2^63 ns is 292 years
 * of uptime), so a record is told apart by its first word, whatever its
 * size. Sizes cannot tell them apart: a sample is cut after its last frame,
 * so it has every size from its header to the whole struct in steps of 8. */
enum record_tag {
	REC_PROC_MAPS = 0x8000000000000001ULL,
	REC_PROC_EVENT = 0x8000000000000002ULL, /* struct proc_lifecycle */
};

/* Counters of the exit capture (map exit_counters). Like drop_counter,
 * nothing left out goes uncounted. */
enum exit_counter {
	EXIT_CNT_MISSED = 0,      /* exits not captured: no mm left, VMA iterator failed, ring full */
	EXIT_CNT_VMAS_DROPPED = 1,/* executable mappings left out of a capture (record full, scan cut) */
	EXIT_CNT_UNTRACKED = 2,   /* processes not flagged for capture: exit_flags full */
	EXIT_CNT_MAX = 4,
};

enum proc_vma_flag {
	PROC_VMA_VDSO = 1,      /* the vDSO: no file, no name */
	PROC_VMA_PATH_FULL = 2, /* the names reach the process's root directory */
	PROC_VMA_SAME_FILE = 4, /* the file of the entry before; no name follows */
	PROC_VMA_EXE = 8,       /* the process's executable (mm->exe_file) */
};

/* Room for entries and names in one capture; a process mapping more
 * executable files than fit has the rest counted in dropped. */
#define PROC_MAPS_DATA 8192
/* Bytes one step may write past a position below PROC_MAPS_DATA. */
#define PROC_MAPS_SLACK 256
/* Bytes of one path component, with its NUL; longer names are not sent. */
#define PROC_VMA_NAME_MAX 128

/* One executable mapping, followed in proc_maps.data by name_len bytes: the
 * components of its file's path, leaf first, each NUL-terminated. The next
 * entry starts at the following multiple of 8. */
struct proc_vma {
	__u64 start;
	__u64 end;
	__u64 offset; /* file offset of start, in bytes */
	__u64 ino;
	__u32 dev;      /* kernel dev_t: major << 20 | minor */
	__u16 flags;    /* enum proc_vma_flag */
	__u16 name_len;
};

/* The executable mappings of a process as it exits. Sent cut after the
 * len bytes of data used. */
struct proc_maps {
	__u64 tag; /* REC_PROC_MAPS */
	__u64 ktime_ns;
	__u32 pid;
	__u32 nr;      /* proc_vma entries in data */
	__u32 dropped; /* executable mappings left out (also in EXIT_CNT_VMAS_DROPPED) */
	__u32 len;     /* bytes of data used */
	__u8 data[PROC_MAPS_DATA + PROC_MAPS_SLACK];
};

#endif
