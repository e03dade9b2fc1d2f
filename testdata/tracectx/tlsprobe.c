/* tlsprobe.c - prints where otel_thread_ctx_v1 lives in each thread, so the
 * Go tests can compare Scan's location with the truth.
 *
 *   tlsprobe [dlopen-path]
 *
 * Output, one line per thread, then "ready":
 *   thread <tid> <tp hex> <&otel_thread_ctx_v1 hex> <trace_id hex> <span_id hex>
 * The process then waits until stdin is closed.
 *
 * Built three ways: PROBE_EXE (variable defined here), linked with
 * libprobe.so (DT_NEEDED), or PROBE_DLOPEN (argv[1] is dlopen'ed after
 * start-up). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef PROBE_EXE
#define OTEL_THREAD_CTX_IMPLEMENTATION
#include "otel_thread_ctx.h"
#ifdef PROBE_ALIGN
/* Pushes the variable behind a 64-byte aligned block: exercises the
 * round-up of PT_TLS size to its alignment. */
__thread char probe_pad[37] __attribute__((aligned(64))) = {1};
#endif
static void *probe_addr(void)
{
#ifdef PROBE_ALIGN
	probe_pad[0]++;
#endif
	return &otel_thread_ctx_v1;
}
static int probe_enter(const uint8_t *t, const uint8_t *s)
{
	if (otel_thread_ctx_enter(t, s, 1) != 0)
		return -1;
	return otel_thread_ctx_set_attr(0, "probe", 5);
}
static int probe_publish(const char *service)
{
	static const char *const keys[] = {"probe.attr"};
	otel_process_ctx_attr attrs[] = {
		{"service.name", service},
		{"service.instance.id", "probe-instance-1"},
		{"deployment.environment.name", "test"},
	};
	return otel_process_ctx_publish(attrs, 3, keys, 1);
}
#elif defined(PROBE_DLOPEN)
static void *(*probe_addr)(void);
static int (*probe_enter)(const uint8_t *, const uint8_t *);
static int (*probe_publish)(const char *);
#else
void *probe_addr(void);
int probe_enter(const uint8_t *, const uint8_t *);
int probe_publish(const char *);
#endif

#define NTHREADS 3

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t printed;

static void hex(char *out, const uint8_t *b, int n)
{
	for (int i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static void *run(void *arg)
{
	int idx = (int)(intptr_t)arg;
	uint8_t trace[16], span[8];
	for (int i = 0; i < 16; i++)
		trace[i] = (uint8_t)(0x10 * (idx + 1) + i);
	for (int i = 0; i < 8; i++)
		span[i] = (uint8_t)(0xa0 + 0x08 * idx + i);
	if (probe_enter(trace, span) != 0) {
		fprintf(stderr, "probe_enter failed\n");
		exit(1);
	}
	void *tp;
	__asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
	char th[33], sh[17];
	hex(th, trace, 16);
	hex(sh, span, 8);
	pthread_mutex_lock(&mu);
	printf("thread %ld %lx %lx %s %s\n", (long)syscall(SYS_gettid), (unsigned long)tp,
	       (unsigned long)probe_addr(), th, sh);
	fflush(stdout);
	pthread_mutex_unlock(&mu);
	pthread_barrier_wait(&printed);
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
#ifdef PROBE_DLOPEN
	if (argc < 2) {
		fprintf(stderr, "usage: %s LIB\n", argv[0]);
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	probe_addr = (void *(*)(void))dlsym(h, "probe_addr");
	probe_enter = (int (*)(const uint8_t *, const uint8_t *))dlsym(h, "probe_enter");
	probe_publish = (int (*)(const char *))dlsym(h, "probe_publish");
	if (!probe_addr || !probe_enter || !probe_publish) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
#else
	(void)argc;
	(void)argv;
#endif
	if (probe_publish("tlsprobe") != 0) {
		perror("probe_publish");
		return 1;
	}
	pthread_barrier_init(&printed, NULL, NTHREADS + 1);
	pthread_t th[NTHREADS];
	for (int i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, run, (void *)(intptr_t)i);
	pthread_barrier_wait(&printed);
	printf("ready\n");
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof buf) > 0)
		;
	return 0;
}
