/*
 * spanprof_jni.c - the JNI side of spanprof-otel. It owns the TLS variable
 * otel_thread_ctx_v1 (sdk/c's writer, defined here and exported in
 * .dynsym) and hands each Java thread, once, direct ByteBuffers over its
 * record buffers and over its TLS slot: every context switch after that is
 * plain Java stores into them, no JNI call.
 */
#define _GNU_SOURCE
#define OTEL_THREAD_CTX_IMPLEMENTATION
#include "otel_thread_ctx.h"

#include <jni.h>
#include <stdlib.h>
#include <string.h>

/* The record buffers handed to Java are sdk/c's per-thread state: its
 * pthread-key destructor stores NULL into the slot and frees them when the
 * thread exits, so no reader follows a pointer into freed memory. */
_Static_assert(offsetof(otel_thread_ctx_state, rec) % 8 == 0, "records 8-byte aligned");

/* setupThread(ByteBuffer[2] out): out[0] = this thread's record buffers
 * (OTEL_THREAD_CTX_MAX_DEPTH levels x 2 records of 640 bytes), out[1] = its
 * 8-byte TLS slot. Returns the records' address, or 0 when out of memory. */
JNIEXPORT jlong JNICALL Java_dev_spanprof_otel_NativeLib_setupThread(JNIEnv *env, jclass cls,
								     jobjectArray out)
{
	(void)cls;
	otel_thread_ctx_state *s = otel_thread_ctx_state_v1;
	if (!s && !(s = otel_thread_ctx_state_alloc()))
		return 0;
	/* A thread set up again (a native thread attached to the JVM anew)
	 * starts with nothing published. */
	__atomic_store_n(otel_thread_ctx_slot_(), (void *)NULL, __ATOMIC_RELEASE);
	jobject recs = (*env)->NewDirectByteBuffer(env, s->rec, (jlong)sizeof(s->rec));
	if (!recs)
		return 0;
	jobject slot = (*env)->NewDirectByteBuffer(env, otel_thread_ctx_slot_(), (jlong)sizeof(void *));
	if (!slot)
		return 0;
	(*env)->SetObjectArrayElement(env, out, 0, recs);
	(*env)->SetObjectArrayElement(env, out, 1, slot);
	return (jlong)(uintptr_t)s->rec;
}

/* publishProcess(byte[] attrs, byte[] keys): both are NUL-terminated UTF-8
 * strings back to back, attrs as key, value, key, value... Returns 0 or
 * errno. */
JNIEXPORT jint JNICALL Java_dev_spanprof_otel_NativeLib_publishProcess(JNIEnv *env, jclass cls,
								       jbyteArray attrs, jbyteArray keys)
{
	(void)cls;
	jsize alen = (*env)->GetArrayLength(env, attrs), klen = (*env)->GetArrayLength(env, keys);
	char *a = malloc((size_t)alen + 1), *k = malloc((size_t)klen + 1);
	size_t na = 0, nk = 0;
	if (!a || !k) {
		free(a);
		free(k);
		return ENOMEM;
	}
	(*env)->GetByteArrayRegion(env, attrs, 0, alen, (jbyte *)a);
	(*env)->GetByteArrayRegion(env, keys, 0, klen, (jbyte *)k);
	a[alen] = 0;
	k[klen] = 0;
	for (jsize i = 0; i < alen; i++)
		na += a[i] == 0;
	for (jsize i = 0; i < klen; i++)
		nk += k[i] == 0;
	otel_process_ctx_attr *pa = calloc(na / 2 + 1, sizeof(*pa));
	const char **pk = calloc(nk + 1, sizeof(*pk));
	int rc = ENOMEM;
	if (pa && pk) {
		const char *p = a;
		for (size_t i = 0; i < na / 2; i++) {
			pa[i].key = p;
			p += strlen(p) + 1;
			pa[i].value = p;
			p += strlen(p) + 1;
		}
		p = k;
		for (size_t i = 0; i < nk; i++) {
			pk[i] = p;
			p += strlen(p) + 1;
		}
		rc = otel_process_ctx_publish(pa, na / 2, pk, nk) == 0 ? 0 : (errno ? errno : EIO);
	}
	free(pa);
	free(pk);
	free(a);
	free(k);
	return rc;
}

/* slot(): this thread's otel_thread_ctx_v1, as a reader sees it (tests). */
JNIEXPORT jlong JNICALL Java_dev_spanprof_otel_NativeLib_slot(JNIEnv *env, jclass cls)
{
	(void)env;
	(void)cls;
	return (jlong)(uintptr_t)__atomic_load_n(otel_thread_ctx_slot_(), __ATOMIC_ACQUIRE);
}

/* peek(addr, dst): copies dst.length bytes of a published record (tests). */
JNIEXPORT void JNICALL Java_dev_spanprof_otel_NativeLib_peek(JNIEnv *env, jclass cls, jlong addr,
							     jbyteArray dst)
{
	(void)cls;
	jsize n = (*env)->GetArrayLength(env, dst);
	if (addr && n > 0 && n <= OTEL_THREAD_CTX_RECORD_SIZE)
		(*env)->SetByteArrayRegion(env, dst, 0, n, (const jbyte *)(uintptr_t)addr);
}
