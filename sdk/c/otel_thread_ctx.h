/*
 * otel_thread_ctx.h - header-only C/C++ writer of the OpenTelemetry thread
 * context (OTEP 4947) and process context (OTEP 4719), as read by spanprof.
 *
 * WHY: an eBPF profiler samples a thread from the kernel and cannot call into
 * the process. It can read memory. This header keeps, for every thread, a
 * pointer to a small packed record with the current trace_id/span_id; the
 * profiler finds the pointer's thread-pointer offset from the ELF dynamic
 * symbol table and reads it at sample time.
 *
 * ---------------------------------------------------------------------------
 * Usage (stb style: one translation unit provides the definitions)
 *
 *   // exactly one .c/.cc file of the module that owns the context:
 *   #define OTEL_THREAD_CTX_IMPLEMENTATION
 *   #include "otel_thread_ctx.h"
 *
 *   // every other file just includes it:
 *   #include "otel_thread_ctx.h"
 *
 *   otel_thread_ctx_enter(trace_id, span_id, 0x01);   // span starts
 *   otel_thread_ctx_set_attr(0, "GET /users", 10);     // optional
 *   ...
 *   otel_thread_ctx_leave();                           // parent restored
 *
 * OTEL_THREAD_CTX_IMPLEMENTATION defines, exactly once per process:
 *   __thread void *otel_thread_ctx_v1                (exported, the contract)
 *   __thread otel_thread_ctx_state *otel_thread_ctx_state_v1 (writer state)
 *   otel_thread_ctx_state_alloc(), otel_process_ctx_publish(),
 *   otel_process_ctx_drop().
 * Define it in ONE module only (the executable or one shared library): two
 * definitions in two modules would give two different variables, and a
 * profiler would read whichever it found first. No weak definition is used on
 * purpose: a duplicate must fail at link time, not silently at run time.
 *
 * Linking, and which TLS access model the compiler picks:
 *   - Executable: the linker only puts symbols into .dynsym when asked. Link
 *     with -Wl,--export-dynamic-symbol=otel_thread_ctx_v1 (binutils >= 2.35,
 *     lld) or -rdynamic. Code in the executable accesses the variable with the
 *     local-exec model (fs:-N, fixed at link time); the agent computes the
 *     offset from PT_TLS.
 *   - Shared library: accesses to otel_thread_ctx_v1 use TLSDESC (one
 *     indirect call that returns the TP offset; cheaper than __tls_get_addr)
 *     on x86-64 whatever the compiler's -mtls-dialect (see
 *     otel_thread_ctx_slot_); -mtls-dialect=gnu2 makes the writer's own
 *     state use it too. Visibility is "default", so the symbol is in
 *     .dynsym without flags. glibc gives libraries loaded at start-up static TLS;
 *     dlopen'ed ones get static TLS from the surplus when it has room, else
 *     dynamic TLS reached through the DTV. The agent handles all three (see
 *     docs/thread-context.md).
 *   - An executable that uses the variable defined in a shared library
 *     accesses it with initial-exec (a GOT slot holding the TP offset).
 *
 * Record layout (packed, 2-byte aligned, host endian, at most 640 bytes):
 *   0 trace_id[16] | 16 span_id[8] | 24 valid u8 | 25 trace_flags u8 |
 *   26 attrs_data_size u16 | 28 attrs: {key u8, len u8, value[len]}...
 *
 * Consistency: a record is never modified while published. Each nesting
 * level has two buffers; a change fills the unpublished one, then stores the
 * pointer with release ordering. A reader that loads the pointer (in the
 * thread's own interrupt context, or from another CPU) sees a whole record.
 *
 * Nesting: enter/leave keep a stack of OTEL_THREAD_CTX_MAX_DEPTH levels.
 * Deeper spans are still published, but leaving back into a level whose
 * record was overwritten publishes NULL (no context) rather than a wrong one.
 *
 * Optional uprobe hook: define OTEL_THREAD_CTX_SPANPROF_HOOK in one file (with
 * or without OTEL_THREAD_CTX_IMPLEMENTATION) to export
 *   void spanprof_set_trace_context(const uint8_t *trace_id16,
 *                                   const uint8_t *span_id8);
 * a no-op the spanprof agent attaches a uprobe to (NULL trace_id clears).
 * Define OTEL_THREAD_CTX_CALL_SPANPROF_HOOK in every file (e.g. with -D) to
 * make enter/leave call it too.
 *
 * Process context (OTEP 4719, header version 2): otel_process_ctx_publish()
 * maps a "OTEL_CTX" memfd (fallback: an anonymous mapping named with
 * PR_SET_VMA_ANON_NAME) holding
 *   {char signature[8]="OTEL_CTX"; u32 version=2; u32 payload_size;
 *    u64 monotonic_published_at_ns (CLOCK_BOOTTIME); u64 payload_ptr}
 * and a protobuf opentelemetry.proto.processcontext.v1development.ProcessContext payload:
 *   ProcessContext { Resource resource = 1; repeated KeyValue extra_attributes = 2; }
 *   Resource { repeated KeyValue attributes = 1; }
 *   KeyValue { string key = 1; AnyValue value = 2; }
 *   AnyValue { string string_value = 1; ArrayValue array_value = 5; }
 *   ArrayValue { repeated AnyValue values = 1; }
 * extra_attributes carry threadlocal.schema_version ("tls_v1", as merged) and
 * threadlocal.attribute_key_map (array: index = attribute key byte).
 */
#ifndef OTEL_THREAD_CTX_H
#define OTEL_THREAD_CTX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OTEL_THREAD_CTX_RECORD_SIZE 640
#define OTEL_THREAD_CTX_HEADER_SIZE 28
#define OTEL_THREAD_CTX_ATTRS_MAX (OTEL_THREAD_CTX_RECORD_SIZE - OTEL_THREAD_CTX_HEADER_SIZE)
#ifndef OTEL_THREAD_CTX_MAX_DEPTH
#define OTEL_THREAD_CTX_MAX_DEPTH 8
#endif

/* The record the TLS pointer points to. Layout is the wire contract. */
typedef struct __attribute__((packed, aligned(2))) otel_thread_ctx_record {
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t valid;
	uint8_t trace_flags;
	uint16_t attrs_data_size;
	uint8_t attrs_data[OTEL_THREAD_CTX_ATTRS_MAX];
} otel_thread_ctx_record;

#ifdef __cplusplus
static_assert(sizeof(otel_thread_ctx_record) == OTEL_THREAD_CTX_RECORD_SIZE, "record size");
#else
_Static_assert(sizeof(otel_thread_ctx_record) == OTEL_THREAD_CTX_RECORD_SIZE, "record size");
#endif

/* Per-thread writer state, allocated on the first enter of each thread and
 * freed at thread exit; kept out of TLS so the TLS block stays 16 bytes and
 * fits glibc's static TLS surplus even when the library is dlopen'ed. */
typedef struct otel_thread_ctx_state {
	uint32_t depth;     /* open spans, may exceed OTEL_THREAD_CTX_MAX_DEPTH */
	uint32_t clobbered; /* the deepest level's record was reused by overflow */
	uint8_t active[OTEL_THREAD_CTX_MAX_DEPTH];
	otel_thread_ctx_record rec[OTEL_THREAD_CTX_MAX_DEPTH][2];
} otel_thread_ctx_state;

/* The contract: read by the profiler. NULL outside spans. */
extern __thread void *otel_thread_ctx_v1;
/* Writer bookkeeping; not read by the profiler. */
extern __thread otel_thread_ctx_state *otel_thread_ctx_state_v1;

/* Slow path of the first enter on a thread; NULL when out of memory. */
otel_thread_ctx_state *otel_thread_ctx_state_alloc(void);

#if defined(OTEL_THREAD_CTX_SPANPROF_HOOK) || defined(OTEL_THREAD_CTX_CALL_SPANPROF_HOOK)
void spanprof_set_trace_context(const uint8_t *trace_id16, const uint8_t *span_id8);
#endif

/* otel_thread_ctx_slot_ returns this thread's &otel_thread_ctx_v1. In
 * shared-library code on x86-64 it does so through a TLS descriptor
 * whatever -mtls-dialect the library is built with (gcc 12 and clang 19
 * default to the traditional dialect, a __tls_get_addr call per access and
 * a DTPMOD64 slot): the OTEP's TLSDESC dialect, whose relocation readers
 * resolve to a static offset when the library got static TLS. The linker
 * relaxes it in executables. The descriptor function may clobber only
 * %rax and the flags, but it is called from inline assembly, so the red
 * zone below the stack pointer is stepped over and the stack aligned
 * first. OTEL_THREAD_CTX_COMPILER_TLS leaves the access to the compiler. */
#if defined(__x86_64__) && defined(__PIC__) && !defined(__PIE__) && !defined(OTEL_THREAD_CTX_COMPILER_TLS)
static inline void **otel_thread_ctx_slot_(void)
{
	void **p;
	__asm__ volatile("mov %%rsp, %%r11\n\t"
			 "sub $128, %%rsp\n\t"
			 "and $-16, %%rsp\n\t"
			 "push %%r11\n\t"
			 "sub $8, %%rsp\n\t"
			 "lea otel_thread_ctx_v1@tlsdesc(%%rip), %%rax\n\t"
			 "call *otel_thread_ctx_v1@tlscall(%%rax)\n\t"
			 "add $8, %%rsp\n\t"
			 "pop %%rsp\n\t"
			 "add %%fs:0, %%rax"
			 : "=a"(p)
			 :
			 : "r11", "cc", "memory");
	return p;
}
#else
static inline void **otel_thread_ctx_slot_(void) { return &otel_thread_ctx_v1; }
#endif

static inline void otel_thread_ctx_publish_(void *rec)
{
	/* Release: the record's bytes are visible before the pointer is. */
	__atomic_store_n(otel_thread_ctx_slot_(), rec, __ATOMIC_RELEASE);
#ifdef OTEL_THREAD_CTX_CALL_SPANPROF_HOOK
	if (rec) {
		otel_thread_ctx_record *r = (otel_thread_ctx_record *)rec;
		spanprof_set_trace_context(r->trace_id, r->span_id);
	} else {
		spanprof_set_trace_context(NULL, NULL);
	}
#endif
}

/* One thread-context attribute: key indexes threadlocal.attribute_key_map
 * of the process context; value is len (<= 255) bytes, not NUL-terminated. */
typedef struct otel_thread_ctx_attr {
	uint8_t key;
	const char *value;
	size_t len;
} otel_thread_ctx_attr;

/* Enters a span on this thread and publishes its record with n attributes
 * at once, so that no sample sees the span without them. Returns 0, or -1
 * (nothing entered) when the state cannot be allocated, a value is longer
 * than 255 bytes or the attributes exceed the record's 612 bytes. */
static inline int otel_thread_ctx_enter_attrs(const uint8_t trace_id[16], const uint8_t span_id[8],
					      uint8_t trace_flags, const otel_thread_ctx_attr *attrs,
					      size_t n)
{
	size_t used = 0;
	for (size_t i = 0; i < n; i++) {
		if (attrs[i].len > 255 || used + 2 + attrs[i].len > OTEL_THREAD_CTX_ATTRS_MAX)
			return -1;
		used += 2 + attrs[i].len;
	}
	otel_thread_ctx_state *s = otel_thread_ctx_state_v1;
	if (!s && !(s = otel_thread_ctx_state_alloc()))
		return -1;
	uint32_t lvl = s->depth++;
	if (lvl >= OTEL_THREAD_CTX_MAX_DEPTH) {
		lvl = OTEL_THREAD_CTX_MAX_DEPTH - 1;
		s->clobbered = 1;
	} else if (lvl == OTEL_THREAD_CTX_MAX_DEPTH - 1) {
		s->clobbered = 0;
	}
	uint8_t next = (uint8_t)(s->active[lvl] ^ 1);
	otel_thread_ctx_record *r = &s->rec[lvl][next];
	memcpy(r->trace_id, trace_id, 16);
	memcpy(r->span_id, span_id, 8);
	r->trace_flags = trace_flags;
	used = 0;
	for (size_t i = 0; i < n; i++) {
		r->attrs_data[used] = attrs[i].key;
		r->attrs_data[used + 1] = (uint8_t)attrs[i].len;
		memcpy(&r->attrs_data[used + 2], attrs[i].value, attrs[i].len);
		used += 2 + attrs[i].len;
	}
	r->attrs_data_size = (uint16_t)used;
	r->valid = 1;
	s->active[lvl] = next;
	otel_thread_ctx_publish_(r);
	return 0;
}

/* Enters a span on this thread: publishes a record with the ids and flags.
 * Returns 0, or -1 when the per-thread state cannot be allocated. */
static inline int otel_thread_ctx_enter(const uint8_t trace_id[16], const uint8_t span_id[8],
					uint8_t trace_flags)
{
	return otel_thread_ctx_enter_attrs(trace_id, span_id, trace_flags, NULL, 0);
}

/* Leaves the innermost span: the parent's record is published again, or
 * NULL when no span is left (or the parent's record was lost to overflow). */
static inline void otel_thread_ctx_leave(void)
{
	otel_thread_ctx_state *s = otel_thread_ctx_state_v1;
	if (!s || s->depth == 0) {
		otel_thread_ctx_publish_(NULL);
		return;
	}
	uint32_t d = --s->depth;
	if (d == 0) {
		otel_thread_ctx_publish_(NULL);
		return;
	}
	uint32_t lvl = d - 1;
	if (lvl >= OTEL_THREAD_CTX_MAX_DEPTH - 1 && s->clobbered) {
		otel_thread_ctx_publish_(NULL);
		return;
	}
	otel_thread_ctx_publish_(&s->rec[lvl][s->active[lvl]]);
}

/* Forgets every open span of this thread (e.g. when a pooled thread picks
 * up unrelated work) and publishes NULL. */
static inline void otel_thread_ctx_reset(void)
{
	otel_thread_ctx_state *s = otel_thread_ctx_state_v1;
	if (s) {
		s->depth = 0;
		s->clobbered = 0;
	}
	otel_thread_ctx_publish_(NULL);
}

/* Appends attribute {key, value} to the current span's record. key indexes
 * threadlocal.attribute_key_map of the process context. Returns 0, or -1
 * when no span is open, len > 255, or the record would exceed 640 bytes. */
static inline int otel_thread_ctx_set_attr(uint8_t key, const char *value, size_t len)
{
	otel_thread_ctx_state *s = otel_thread_ctx_state_v1;
	if (!s || s->depth == 0 || len > 255)
		return -1;
	uint32_t lvl = s->depth - 1;
	if (lvl >= OTEL_THREAD_CTX_MAX_DEPTH)
		lvl = OTEL_THREAD_CTX_MAX_DEPTH - 1;
	const otel_thread_ctx_record *cur = &s->rec[lvl][s->active[lvl]];
	size_t used = cur->attrs_data_size;
	if (used + 2 + len > OTEL_THREAD_CTX_ATTRS_MAX)
		return -1;
	uint8_t next = (uint8_t)(s->active[lvl] ^ 1);
	otel_thread_ctx_record *r = &s->rec[lvl][next];
	memcpy(r, cur, OTEL_THREAD_CTX_HEADER_SIZE + used);
	r->attrs_data[used] = key;
	r->attrs_data[used + 1] = (uint8_t)len;
	memcpy(&r->attrs_data[used + 2], value, len);
	r->attrs_data_size = (uint16_t)(used + 2 + len);
	s->active[lvl] = next;
	otel_thread_ctx_publish_(r);
	return 0;
}

/* One resource attribute of the process context. */
typedef struct otel_process_ctx_attr {
	const char *key;
	const char *value;
} otel_process_ctx_attr;

/* Publishes (or updates) the process context: resource attributes such as
 * service.name, service.instance.id, deployment.environment.name, and the
 * names of thread-context attribute keys (index = key byte). Returns 0 or -1
 * with errno set. Not thread-safe against itself: call from one thread. */
int otel_process_ctx_publish(const otel_process_ctx_attr *attrs, size_t n_attrs,
			     const char *const *thread_attr_keys, size_t n_keys);

/* Unmaps the process context, e.g. at SDK shutdown. */
int otel_process_ctx_drop(void);

#ifdef __cplusplus
}
#endif

#endif /* OTEL_THREAD_CTX_H */

/* ------------------------------------------------------------------------
 * Implementation: compiled only where OTEL_THREAD_CTX_IMPLEMENTATION is set.
 */
#if defined(OTEL_THREAD_CTX_IMPLEMENTATION) && !defined(OTEL_THREAD_CTX_IMPLEMENTED)
#define OTEL_THREAD_CTX_IMPLEMENTED

/* mmap/madvise flags, syscall() and clock_gettime() need the default (gnu)
 * dialect or _GNU_SOURCE defined before the first #include of the file. */
#if defined(__GLIBC__) && !defined(__USE_MISC)
#error "otel_thread_ctx.h implementation: define _GNU_SOURCE (or _DEFAULT_SOURCE) before any #include, or build with -std=gnu11/gnu++17"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

#ifdef __cplusplus
extern "C" {
#endif

__attribute__((visibility("default"))) __thread void *otel_thread_ctx_v1 = NULL;
__attribute__((visibility("default"))) __thread otel_thread_ctx_state *otel_thread_ctx_state_v1 = NULL;

static pthread_once_t otel_thread_ctx_once_ = PTHREAD_ONCE_INIT;
static pthread_key_t otel_thread_ctx_key_;
static int otel_thread_ctx_key_ok_;

/* Runs on the exiting thread: unpublish first so no reader follows a
 * pointer into freed memory. */
static void otel_thread_ctx_free_(void *p)
{
	__atomic_store_n(otel_thread_ctx_slot_(), (void *)NULL, __ATOMIC_RELEASE);
	otel_thread_ctx_state_v1 = NULL;
	free(p);
}

static void otel_thread_ctx_make_key_(void)
{
	otel_thread_ctx_key_ok_ = pthread_key_create(&otel_thread_ctx_key_, otel_thread_ctx_free_) == 0;
}

otel_thread_ctx_state *otel_thread_ctx_state_alloc(void)
{
	otel_thread_ctx_state *s = (otel_thread_ctx_state *)calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	pthread_once(&otel_thread_ctx_once_, otel_thread_ctx_make_key_);
	if (otel_thread_ctx_key_ok_)
		pthread_setspecific(otel_thread_ctx_key_, s);
	otel_thread_ctx_state_v1 = s;
	return s;
}

/* --- minimal protobuf encoder (varints and length-delimited fields) --- */

static size_t otel_pb_varint_size_(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static uint8_t *otel_pb_varint_(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* Size of a length-delimited field (field numbers < 16: one-byte tag). */
static size_t otel_pb_field_size_(size_t len)
{
	return 1 + otel_pb_varint_size_(len) + len;
}

static uint8_t *otel_pb_field_(uint8_t *p, unsigned field, size_t len)
{
	*p++ = (uint8_t)((field << 3) | 2);
	return otel_pb_varint_(p, len);
}

static uint8_t *otel_pb_bytes_(uint8_t *p, unsigned field, const char *s, size_t len)
{
	p = otel_pb_field_(p, field, len);
	memcpy(p, s, len);
	return p + len;
}

/* KeyValue{key=1, value=2: AnyValue{string_value=1}} */
static size_t otel_pb_kv_str_size_(const char *k, const char *v)
{
	return otel_pb_field_size_(strlen(k)) + otel_pb_field_size_(otel_pb_field_size_(strlen(v)));
}

static uint8_t *otel_pb_kv_str_(uint8_t *p, const char *k, const char *v)
{
	p = otel_pb_bytes_(p, 1, k, strlen(k));
	p = otel_pb_field_(p, 2, otel_pb_field_size_(strlen(v)));
	return otel_pb_bytes_(p, 1, v, strlen(v));
}

/* ArrayValue{values=1: AnyValue{string_value=1}...} */
static size_t otel_pb_array_size_(const char *const *vals, size_t n)
{
	size_t sz = 0;
	for (size_t i = 0; i < n; i++)
		sz += otel_pb_field_size_(otel_pb_field_size_(strlen(vals[i])));
	return sz;
}

/* KeyValue{key, AnyValue{array_value=5: ArrayValue}} */
static size_t otel_pb_kv_array_size_(const char *k, const char *const *vals, size_t n)
{
	return otel_pb_field_size_(strlen(k)) +
	       otel_pb_field_size_(otel_pb_field_size_(otel_pb_array_size_(vals, n)));
}

static uint8_t *otel_pb_kv_array_(uint8_t *p, const char *k, const char *const *vals, size_t n)
{
	size_t arr = otel_pb_array_size_(vals, n);
	p = otel_pb_bytes_(p, 1, k, strlen(k));
	p = otel_pb_field_(p, 2, otel_pb_field_size_(arr));
	p = otel_pb_field_(p, 5, arr);
	for (size_t i = 0; i < n; i++) {
		p = otel_pb_field_(p, 1, otel_pb_field_size_(strlen(vals[i])));
		p = otel_pb_bytes_(p, 1, vals[i], strlen(vals[i]));
	}
	return p;
}

#define OTEL_PCTX_SCHEMA_KEY "threadlocal.schema_version"
#define OTEL_PCTX_SCHEMA "tls_v1"
#define OTEL_PCTX_KEYMAP_KEY "threadlocal.attribute_key_map"

/* Encodes ProcessContext{resource=1: Resource{attributes=1...},
 * extra_attributes=2...} into a malloc'ed buffer. */
static uint8_t *otel_pctx_encode_(const otel_process_ctx_attr *attrs, size_t n,
				  const char *const *keys, size_t n_keys, size_t *out_len)
{
	size_t res = 0;
	for (size_t i = 0; i < n; i++)
		res += otel_pb_field_size_(otel_pb_kv_str_size_(attrs[i].key, attrs[i].value));
	size_t total = otel_pb_field_size_(res);
	total += otel_pb_field_size_(otel_pb_kv_str_size_(OTEL_PCTX_SCHEMA_KEY, OTEL_PCTX_SCHEMA));
	if (n_keys)
		total += otel_pb_field_size_(otel_pb_kv_array_size_(OTEL_PCTX_KEYMAP_KEY, keys, n_keys));
	uint8_t *buf = (uint8_t *)malloc(total ? total : 1);
	if (!buf)
		return NULL;
	uint8_t *p = otel_pb_field_(buf, 1, res);
	for (size_t i = 0; i < n; i++) {
		p = otel_pb_field_(p, 1, otel_pb_kv_str_size_(attrs[i].key, attrs[i].value));
		p = otel_pb_kv_str_(p, attrs[i].key, attrs[i].value);
	}
	p = otel_pb_field_(p, 2, otel_pb_kv_str_size_(OTEL_PCTX_SCHEMA_KEY, OTEL_PCTX_SCHEMA));
	p = otel_pb_kv_str_(p, OTEL_PCTX_SCHEMA_KEY, OTEL_PCTX_SCHEMA);
	if (n_keys) {
		p = otel_pb_field_(p, 2, otel_pb_kv_array_size_(OTEL_PCTX_KEYMAP_KEY, keys, n_keys));
		p = otel_pb_kv_array_(p, OTEL_PCTX_KEYMAP_KEY, keys, n_keys);
	}
	*out_len = (size_t)(p - buf);
	return buf;
}

/* The 32-byte header of OTEP 4719, version 2. */
typedef struct otel_process_ctx_header {
	char signature[8];
	uint32_t version;
	uint32_t payload_size;
	uint64_t monotonic_published_at_ns; /* 0 while an update is under way */
	uint64_t payload;
} otel_process_ctx_header;

static otel_process_ctx_header *otel_pctx_map_;
static size_t otel_pctx_map_size_;
static uint8_t *otel_pctx_payload_;

static uint64_t otel_pctx_now_(uint64_t prev)
{
	struct timespec ts;
	/* CLOCK_BOOTTIME, as the merged OTEP has it: readers compare it with
	 * the value they read before the payload, and it never goes back. */
	clock_gettime(CLOCK_BOOTTIME, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	/* Readers detect updates by a change: never 0, never the old value. */
	return now > prev ? now : prev + 1;
}

static void *otel_pctx_map_new_(size_t size)
{
	long fd = syscall(SYS_memfd_create, "OTEL_CTX", MFD_CLOEXEC | MFD_NOEXEC_SEAL);
	if (fd < 0)
		fd = syscall(SYS_memfd_create, "OTEL_CTX", MFD_CLOEXEC);
	if (fd >= 0) {
		void *m = MAP_FAILED;
		if (ftruncate((int)fd, (off_t)size) == 0)
			m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, (int)fd, 0);
		close((int)fd);
		if (m != MAP_FAILED)
			return m;
	}
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return m == MAP_FAILED ? NULL : m;
}

int otel_process_ctx_publish(const otel_process_ctx_attr *attrs, size_t n_attrs,
			     const char *const *thread_attr_keys, size_t n_keys)
{
	size_t len = 0;
	uint8_t *payload = otel_pctx_encode_(attrs, n_attrs, thread_attr_keys, n_keys, &len);
	if (!payload)
		return -1;
	otel_process_ctx_header *h = otel_pctx_map_;
	if (!h) {
		long page = sysconf(_SC_PAGESIZE);
		size_t size = page > 0 ? (size_t)page : 4096;
		h = (otel_process_ctx_header *)otel_pctx_map_new_(size);
		if (!h) {
			free(payload);
			return -1;
		}
		madvise(h, size, MADV_DONTFORK);
		h->version = 2;
		h->payload_size = (uint32_t)len;
		h->payload = (uint64_t)(uintptr_t)payload;
		h->monotonic_published_at_ns = otel_pctx_now_(0);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		memcpy(h->signature, "OTEL_CTX", 8);
		otel_pctx_map_ = h;
		otel_pctx_map_size_ = size;
	} else {
		uint64_t prev = h->monotonic_published_at_ns;
		__atomic_store_n(&h->monotonic_published_at_ns, (uint64_t)0, __ATOMIC_SEQ_CST);
		h->payload_size = (uint32_t)len;
		h->payload = (uint64_t)(uintptr_t)payload;
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		__atomic_store_n(&h->monotonic_published_at_ns, otel_pctx_now_(prev), __ATOMIC_SEQ_CST);
	}
	/* Readers that raced see monotonic_published_at_ns change and retry. */
	free(otel_pctx_payload_);
	otel_pctx_payload_ = payload;
	/* Fails on memfd mappings and old kernels; the memfd name suffices then. */
	prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)h, otel_pctx_map_size_,
	      (unsigned long)"OTEL_CTX");
	return 0;
}

int otel_process_ctx_drop(void)
{
	if (!otel_pctx_map_)
		return 0;
	int rc = munmap(otel_pctx_map_, otel_pctx_map_size_);
	otel_pctx_map_ = NULL;
	free(otel_pctx_payload_);
	otel_pctx_payload_ = NULL;
	return rc;
}

#ifdef __cplusplus
}
#endif

#endif /* OTEL_THREAD_CTX_IMPLEMENTATION */

/* The uprobe hook does not need the thread context: a service may export
 * only this function (define OTEL_THREAD_CTX_SPANPROF_HOOK without
 * OTEL_THREAD_CTX_IMPLEMENTATION) and publish through BPF task storage. */
#if defined(OTEL_THREAD_CTX_SPANPROF_HOOK) && !defined(OTEL_THREAD_CTX_HOOK_DEFINED)
#define OTEL_THREAD_CTX_HOOK_DEFINED
#ifdef __cplusplus
extern "C" {
#endif
/* The agent attaches a uprobe here; the asm keeps the call and arguments. */
__attribute__((noinline, used, visibility("default"))) void
spanprof_set_trace_context(const uint8_t *trace_id16, const uint8_t *span_id8)
{
	__asm__ __volatile__("" : : "r"(trace_id16), "r"(span_id8) : "memory");
}
#ifdef __cplusplus
}
#endif
#endif
