/* workload.c - ground truth for trace-correlation tests.
 *
 *   workload TRUTH_FILE DURATION_SECONDS [THREADS=4]
 *
 * Each thread runs spans of 20-60 ms with random trace/span ids, burning CPU
 * inside the span in its own noinline function busy_<n>, then 1-5 ms of CPU
 * outside any span in gap_work. When the duration is over, every span is
 * written to TRUTH_FILE as
 *   tid trace_id span_id start_realtime_ns end_realtime_ns function held_ns released_ns
 * (start is taken before the context is published, end after it is
 * cleared, so every sample that carries a span's ids falls in its window;
 * held after it is published and released before it is cleared, so every
 * sample of the thread in held..released must carry them, however long
 * the thread was preempted between a stamp and the publication).
 * stdout gets "pid <pid>" at start and "done <spans>" at the end. SIGTERM or
 * SIGINT ends the run early (after the current span) and still writes the
 * truth.
 *
 * Variants (one source): WL_EXE defines the context in the executable,
 * WL_LIB calls libwlctx.so (TLSDESC), WL_DLOPEN dlopens it (WL_CTX_LIB,
 * after WL_TLS_FILL), WL_HOOK only calls the exported
 * spanprof_set_trace_context uprobe hook. Every span's record carries three
 * attributes derived from its span id (wl_attrs).
 *
 * Late loads: with WL_DLOPEN_DELAY=SECONDS, WL_DLOPEN's threads run
 * gap_work outside any span until the main thread, that long after start,
 * dlopens the context library and publishes the process context; spans
 * begin after it. WL_LATE_LIB=PATH with WL_LATE_AFTER=SECONDS has any
 * variant dlopen PATH (and leave it unused) that long after start. With
 * WL_LATE_WHEN=FILE, either delay counts from the moment FILE exists.
 * WL_CTX_UPDATE=SECONDS republishes the process context that long after
 * it was published, with service.name "spanprof-workload-updated".
 * WL_EVENTS=PATH gets "loaded <realtime_ns>" right after the late dlopen
 * returned and "updated <realtime_ns>" after the republish.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <dlfcn.h>

/* The record's three attributes, named by the process context's
 * threadlocal.attribute_key_map (index = key byte). */
__attribute__((unused)) static const char *const wl_keys[] = {"http.request.method", "http.route", "enduser.id"};
#define WL_NKEYS 3

#if defined(WL_EXE)
#define OTEL_THREAD_CTX_IMPLEMENTATION
#include "otel_thread_ctx.h"
static int ctx_enter(const uint8_t *t, const uint8_t *s, const otel_thread_ctx_attr *a, size_t n)
{
	return otel_thread_ctx_enter_attrs(t, s, 1, a, n);
}
static void ctx_leave(void) { otel_thread_ctx_leave(); }
static int ctx_publish(const otel_process_ctx_attr *a, size_t n)
{
	return otel_process_ctx_publish(a, n, wl_keys, WL_NKEYS);
}
#elif defined(WL_LIB) || defined(WL_DLOPEN)
#include "otel_thread_ctx.h"
#ifdef WL_LIB
int wl_enter(const uint8_t *trace_id, const uint8_t *span_id, const otel_thread_ctx_attr *attrs, size_t n);
void wl_leave(void);
int wl_publish(const otel_process_ctx_attr *attrs, size_t n, const char *const *keys, size_t nkeys);
#else
/* Resolved from the library named by WL_CTX_LIB, dlopen'ed after start-up
 * (after the one named by WL_TLS_FILL, which can use up the static TLS
 * surplus first). */
#include <dlfcn.h>
static int (*wl_enter)(const uint8_t *, const uint8_t *, const otel_thread_ctx_attr *, size_t);
static void (*wl_leave)(void);
static int (*wl_publish)(const otel_process_ctx_attr *, size_t, const char *const *, size_t);
static void *wl_dlopen(const char *env, int required)
{
	const char *path = getenv(env);
	if (!path) {
		if (required) {
			fprintf(stderr, "%s not set\n", env);
			exit(2);
		}
		return NULL;
	}
	void *h = dlopen(path, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		exit(1);
	}
	return h;
}
static void wl_load(void)
{
	void *fill = wl_dlopen("WL_TLS_FILL", 0);
	if (fill) {
		int (*touch)(void) = (int (*)(void))dlsym(fill, "tls_fill_touch");
		if (touch)
			touch();
	}
	void *h = wl_dlopen("WL_CTX_LIB", 1);
	wl_enter = (int (*)(const uint8_t *, const uint8_t *, const otel_thread_ctx_attr *, size_t))dlsym(h, "wl_enter");
	wl_leave = (void (*)(void))dlsym(h, "wl_leave");
	wl_publish = (int (*)(const otel_process_ctx_attr *, size_t, const char *const *, size_t))dlsym(h, "wl_publish");
	if (!wl_enter || !wl_leave || !wl_publish) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		exit(1);
	}
}
#endif
static int ctx_enter(const uint8_t *t, const uint8_t *s, const otel_thread_ctx_attr *a, size_t n)
{
	return wl_enter(t, s, a, n);
}
static void ctx_leave(void) { wl_leave(); }
static int ctx_publish(const otel_process_ctx_attr *a, size_t n) { return wl_publish(a, n, wl_keys, WL_NKEYS); }
#elif defined(WL_HOOK)
#define OTEL_THREAD_CTX_SPANPROF_HOOK
#include "otel_thread_ctx.h"
static int ctx_enter(const uint8_t *t, const uint8_t *s, const otel_thread_ctx_attr *a, size_t n)
{
	(void)a;
	(void)n;
	spanprof_set_trace_context(t, s);
	return 0;
}
static void ctx_leave(void) { spanprof_set_trace_context(NULL, NULL); }
static int ctx_publish(const otel_process_ctx_attr *a, size_t n) { (void)a; (void)n; return 0; }
#else
#error "define WL_EXE, WL_LIB, WL_DLOPEN or WL_HOOK"
#endif

/* wl_attrs fills the span's attributes, a function of its span id that the
 * tests recompute (test/truth.SpanAttributes): method, route, user. */
static size_t wl_attrs(const uint8_t *span, char bufs[3][32], otel_thread_ctx_attr *a)
{
	const char *method = (span[0] & 1) ? "POST" : "GET";
	int n1 = snprintf(bufs[1], 32, "/items/%u", span[1] % 16u);
	int n2 = snprintf(bufs[2], 32, "u%02x%02x", span[2], span[3]);
	a[0] = (otel_thread_ctx_attr){0, method, strlen(method)};
	a[1] = (otel_thread_ctx_attr){1, bufs[1], (size_t)n1};
	a[2] = (otel_thread_ctx_attr){2, bufs[2], (size_t)n2};
	return 3;
}

#define MAX_THREADS 8
#define MAX_SPANS 8192

struct span {
	uint8_t trace[16], span[8];
	uint64_t start, end, held, released;
};

struct worker {
	int idx;
	long tid;
	uint64_t deadline, seed;
	int n;
	const char *fn;
	struct span spans[MAX_SPANS];
};

static volatile uint64_t sink;
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Spins until the monotonic clock passes until. Not a leaf: it calls
 * clock_gettime, so every compiler keeps its frame. Each copy mixes in its
 * own name so that identical-code folding (gcc -fipa-icf) cannot merge
 * them into one symbol. */
#define BUSY(name)                                                        \
	__attribute__((noinline)) static void name(uint64_t until)       \
	{                                                                 \
		uint64_t x = until ^ (uintptr_t)#name;                    \
		while (now_ns(CLOCK_MONOTONIC) < until)                   \
			for (int i = 0; i < 2000; i++)                    \
				x = x * 6364136223846793005ull + 1442695040888963407ull; \
		sink = x;                                                 \
		__asm__ volatile("" ::: "memory");                        \
	}
BUSY(busy_0)
BUSY(busy_1)
BUSY(busy_2)
BUSY(busy_3)
BUSY(busy_4)
BUSY(busy_5)
BUSY(busy_6)
BUSY(busy_7)
BUSY(gap_work)

static void (*const busy_fns[MAX_THREADS])(uint64_t) = {busy_0, busy_1, busy_2, busy_3,
							 busy_4, busy_5, busy_6, busy_7};
static const char *const busy_names[MAX_THREADS] = {"busy_0", "busy_1", "busy_2", "busy_3",
						    "busy_4", "busy_5", "busy_6", "busy_7"};

static FILE *wl_events;

static void wl_event(const char *what)
{
	if (!wl_events)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	fprintf(wl_events, "%s %llu\n", what, (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
	fflush(wl_events);
}

/* Sleeps secs, or less when a signal ends the run. */
static void wl_sleep(double secs)
{
	struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
	while (nanosleep(&ts, &ts) != 0 && !stop)
		;
}

/* Waits until the file WL_LATE_WHEN names exists (at once without it),
 * then secs more. */
static void wl_late_wait(double secs)
{
	const char *gate = getenv("WL_LATE_WHEN");
	while (gate && access(gate, F_OK) != 0 && !stop)
		wl_sleep(0.01);
	wl_sleep(secs);
}

#ifdef WL_DLOPEN
/* Set once the context library is loaded, with WL_DLOPEN_DELAY. */
static volatile int wl_ready;
static int wl_delayed;

/* With WL_DLOPEN_LATE set, the threads start before the library is
 * dlopen'ed and wait here: their DTVs predate the module (glibc grows a
 * thread's DTV at its first access; musl installs a new one in every
 * thread as it loads the module). */
static pthread_barrier_t wl_loaded;
static int wl_late;
#endif

static void *run(void *arg)
{
	struct worker *w = (struct worker *)arg;
#ifdef WL_DLOPEN
	if (wl_late)
		pthread_barrier_wait(&wl_loaded);
	while (wl_delayed && !__atomic_load_n(&wl_ready, __ATOMIC_ACQUIRE) && !stop)
		gap_work(now_ns(CLOCK_MONOTONIC) + 2000000ull);
#endif
	w->tid = (long)syscall(SYS_gettid);
	w->fn = busy_names[w->idx];
	while (!stop && now_ns(CLOCK_MONOTONIC) < w->deadline && w->n < MAX_SPANS) {
		struct span *s = &w->spans[w->n];
		for (int i = 0; i < 16; i += 8) {
			uint64_t r = rnd(&w->seed);
			memcpy(s->trace + i, &r, 8);
		}
		uint64_t r = rnd(&w->seed);
		memcpy(s->span, &r, 8);
		uint64_t dur = (20 + rnd(&w->seed) % 41) * 1000000ull;
		char bufs[3][32];
		otel_thread_ctx_attr attrs[3];
		size_t na = wl_attrs(s->span, bufs, attrs);
		s->start = now_ns(CLOCK_REALTIME);
		if (ctx_enter(s->trace, s->span, attrs, na) != 0) {
			fprintf(stderr, "ctx_enter failed\n");
			exit(1);
		}
		s->held = now_ns(CLOCK_REALTIME);
		busy_fns[w->idx](now_ns(CLOCK_MONOTONIC) + dur);
		s->released = now_ns(CLOCK_REALTIME);
		ctx_leave();
		s->end = now_ns(CLOCK_REALTIME);
		w->n++;
		gap_work(now_ns(CLOCK_MONOTONIC) + (1 + rnd(&w->seed) % 5) * 1000000ull);
	}
	return NULL;
}

static void hex(FILE *f, const uint8_t *b, int n)
{
	for (int i = 0; i < n; i++)
		fprintf(f, "%02x", b[i]);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s TRUTH_FILE DURATION_SECONDS [THREADS]\n", argv[0]);
		return 2;
	}
	double secs = atof(argv[2]);
	int nthreads = argc > 3 ? atoi(argv[3]) : 4;
	if (nthreads < 1 || nthreads > MAX_THREADS) {
		fprintf(stderr, "threads must be 1..%d\n", MAX_THREADS);
		return 2;
	}
	FILE *out = fopen(argv[1], "w");
	if (!out) {
		perror(argv[1]);
		return 1;
	}
	otel_process_ctx_attr attrs[] = {
		{"service.name", "spanprof-workload"},
		{"service.instance.id", "workload-1"},
		{"deployment.environment.name", "test"},
	};
	if (getenv("WL_EVENTS") && !(wl_events = fopen(getenv("WL_EVENTS"), "w"))) {
		perror(getenv("WL_EVENTS"));
		return 1;
	}
	double update_after = getenv("WL_CTX_UPDATE") ? atof(getenv("WL_CTX_UPDATE")) : 0;
#ifdef WL_DLOPEN
	double delay = getenv("WL_DLOPEN_DELAY") ? atof(getenv("WL_DLOPEN_DELAY")) : 0;
	wl_delayed = delay > 0;
	wl_late = getenv("WL_DLOPEN_LATE") != NULL || wl_delayed;
	if (wl_late)
		pthread_barrier_init(&wl_loaded, NULL, (unsigned)nthreads + 1);
	else
		wl_load();
	if (!wl_late && ctx_publish(attrs, 3) != 0)
		perror("process context");
#else
	if (ctx_publish(attrs, 3) != 0)
		perror("process context");
#endif
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);

	static struct worker ws[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	uint64_t deadline = now_ns(CLOCK_MONOTONIC) + (uint64_t)(secs * 1e9);
	for (int i = 0; i < nthreads; i++) {
		ws[i].idx = i;
		ws[i].deadline = deadline;
		ws[i].seed = now_ns(CLOCK_REALTIME) ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
		pthread_create(&th[i], NULL, run, &ws[i]);
	}
#ifdef WL_DLOPEN
	if (wl_late) {
		if (wl_delayed) {
			pthread_barrier_wait(&wl_loaded); /* the threads run gap_work meanwhile */
			wl_late_wait(delay);
		}
		wl_load();
		wl_event("loaded");
		if (ctx_publish(attrs, 3) != 0)
			perror("process context");
		if (wl_delayed)
			__atomic_store_n(&wl_ready, 1, __ATOMIC_RELEASE);
		else
			pthread_barrier_wait(&wl_loaded);
	}
#endif
	if (getenv("WL_LATE_LIB")) {
		wl_late_wait(getenv("WL_LATE_AFTER") ? atof(getenv("WL_LATE_AFTER")) : 0);
		if (!dlopen(getenv("WL_LATE_LIB"), RTLD_NOW)) {
			fprintf(stderr, "dlopen %s: %s\n", getenv("WL_LATE_LIB"), dlerror());
			return 1;
		}
		wl_event("loaded");
	}
	if (update_after > 0 && !stop) {
		wl_sleep(update_after);
		attrs[0].value = "spanprof-workload-updated";
		if (!stop && ctx_publish(attrs, 3) != 0)
			perror("process context update");
		wl_event("updated");
	}
	int total = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(th[i], NULL);
		for (int k = 0; k < ws[i].n; k++) {
			struct span *s = &ws[i].spans[k];
			fprintf(out, "%ld ", ws[i].tid);
			hex(out, s->trace, 16);
			fputc(' ', out);
			hex(out, s->span, 8);
			fprintf(out, " %llu %llu %s %llu %llu\n", (unsigned long long)s->start,
				(unsigned long long)s->end, ws[i].fn,
				(unsigned long long)s->held, (unsigned long long)s->released);
		}
		total += ws[i].n;
	}
	if (fclose(out) != 0) {
		perror(argv[1]);
		return 1;
	}
	printf("done %d\n", total);
	return 0;
}
