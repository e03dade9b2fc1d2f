/* spans.c - ground truth for the off-CPU end-to-end test.
 *
 *   spans TRUTH_FILE SECONDS [WORKERS=3]
 *
 * Prints "pid <pid>", then waits for a line on stdin so that the profiler
 * is attached before the first span. Each worker thread then runs spans
 * (OTel thread context, sdk/c/otel_thread_ctx.h) that block in one known
 * way, in its own noinline function:
 *   sleep     wait_sleep:    clock_nanosleep 2-6 ms        (do_nanosleep)
 *   futex     wait_futex:    FUTEX_WAIT timing out, 2-6 ms (futex wait)
 *   pipe      wait_pipe:     read(2) of a pipe its helper writes 2-6 ms later
 *   pingpong  wait_pingpong: 40 reads answered ~200 µs later each: short
 *                            waits that the profiler samples
 * with a little CPU work before, and a 1 ms sleep outside any span after.
 * The time blocked is measured around each blocking call: its wall time
 * (CLOCK_MONOTONIC) less the thread's CPU time in it
 * (CLOCK_THREAD_CPUTIME_ID), so the time off CPU. The two differ by the
 * system call's own work, and on a virtual machine by the time the thread
 * was current on a virtual CPU the host did not run: qemu's single-threaded
 * TCG runs one vCPU at a time, for up to 100 ms while the other waits.
 * The thread's involuntary context switches in the blocking calls
 * (getrusage RUSAGE_THREAD, ru_nivcsw) are counted too: a thread preempted
 * there, woken but switched out before it returned, waited for a CPU in
 * state R, which is in the time measured but is CPU contention, not a
 * wait, for a profiler of blocked time. An emulated machine under load
 * does it often (16 ms of a 23 ms sleep call); these machines rarely.
 * At the end every span is written to TRUTH_FILE as
 *   tid trace_id span_id start_realtime_ns end_realtime_ns kind blocked_ns function preempted
 * and stdout gets "done <spans>". */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define OTEL_THREAD_CTX_IMPLEMENTATION
#include "otel_thread_ctx.h"

#define MAX_WORKERS 4
#define MAX_SPANS 4096
#define PINGPONG_ROUNDS 40

enum kind { K_SLEEP, K_FUTEX, K_PIPE, K_PINGPONG, K_USLEEP, K_MAX };
static const char *const kind_names[K_MAX] = {"sleep", "futex", "pipe", "pingpong", "usleep"};
static const char *const fn_names[K_MAX] = {"wait_sleep", "wait_futex", "wait_pipe", "wait_pingpong", "wait_usleep"};

struct span {
	uint8_t trace[16], span[8];
	uint64_t start, end, blocked;
	long preempted; /* involuntary context switches in the blocking calls */
	int kind;
};

struct worker {
	long tid;
	uint64_t deadline, seed;
	int cmd[2], data[2]; /* to and from the helper */
	int n;
	struct span spans[MAX_SPANS];
};

static volatile uint64_t sink;

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

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0)
		;
}

/* The helper answers each command (a delay in ns) with one byte after that
 * delay; it never enters a span. */
static void *helper(void *arg)
{
	struct worker *w = (struct worker *)arg;
	uint64_t delay;
	char c = 'x';
	while (read(w->cmd[0], &delay, sizeof delay) == sizeof delay) {
		sleep_ns(delay);
		if (write(w->data[1], &c, 1) != 1)
			break;
	}
	return NULL;
}

/* A moment: wall time, the thread's CPU time and its involuntary context
 * switches so far. */
struct mark {
	uint64_t wall, cpu;
	long nivcsw;
};

static long nivcsw_now(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : 0;
}

static struct mark mark_now(void)
{
	long n = nivcsw_now();
	return (struct mark){now_ns(CLOCK_MONOTONIC), now_ns(CLOCK_THREAD_CPUTIME_ID), n};
}

/* The involuntary switches of the current span's blocking calls. */
static __thread long preempted;

/* off_cpu_since is the time the thread was off CPU since m. */
static uint64_t off_cpu_since(struct mark m)
{
	uint64_t wall = now_ns(CLOCK_MONOTONIC) - m.wall, cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - m.cpu;
	preempted += nivcsw_now() - m.nivcsw;
	return wall > cpu ? wall - cpu : 0;
}

/* Each waiter returns the time it was blocked. */
__attribute__((noinline)) static uint64_t wait_sleep(uint64_t ns)
{
	struct mark m = mark_now();
	sleep_ns(ns);
	return off_cpu_since(m);
}

/* usleep goes through glibc's nanosleep and clock_nanosleep, none of
 * which keeps a frame pointer: the waiting function is found only by
 * unwinding them. */
__attribute__((noinline)) static uint64_t wait_usleep(uint64_t ns)
{
	struct mark m = mark_now();
	usleep((useconds_t)(ns / 1000));
	return off_cpu_since(m);
}

__attribute__((noinline)) static uint64_t wait_futex(uint64_t ns)
{
	static __thread int word;
	struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	struct mark m = mark_now();
	syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
	return off_cpu_since(m);
}

__attribute__((noinline)) static uint64_t wait_pipe(struct worker *w, uint64_t ns)
{
	char c;
	if (write(w->cmd[1], &ns, sizeof ns) != sizeof ns)
		exit(1);
	struct mark m = mark_now();
	if (read(w->data[0], &c, 1) != 1)
		exit(1);
	return off_cpu_since(m);
}

__attribute__((noinline)) static uint64_t wait_pingpong(struct worker *w)
{
	uint64_t blocked = 0, ns = 200000;
	char c;
	for (int i = 0; i < PINGPONG_ROUNDS; i++) {
		if (write(w->cmd[1], &ns, sizeof ns) != sizeof ns)
			exit(1);
		struct mark m = mark_now();
		if (read(w->data[0], &c, 1) != 1)
			exit(1);
		blocked += off_cpu_since(m);
	}
	return blocked;
}

__attribute__((noinline)) static void work(uint64_t ns)
{
	uint64_t until = now_ns(CLOCK_MONOTONIC) + ns, x = until;
	while (now_ns(CLOCK_MONOTONIC) < until)
		for (int i = 0; i < 500; i++)
			x = x * 6364136223846793005ull + 1442695040888963407ull;
	sink = x;
}

static void *run(void *arg)
{
	struct worker *w = (struct worker *)arg;
	w->tid = (long)syscall(SYS_gettid);
	while (now_ns(CLOCK_MONOTONIC) < w->deadline && w->n < MAX_SPANS) {
		struct span *s = &w->spans[w->n];
		for (int i = 0; i < 16; i += 8) {
			uint64_t r = rnd(&w->seed);
			memcpy(s->trace + i, &r, 8);
		}
		uint64_t r = rnd(&w->seed);
		memcpy(s->span, &r, 8);
		s->kind = w->n % K_MAX;
		uint64_t d = (2 + rnd(&w->seed) % 5) * 1000000ull;
		s->start = now_ns(CLOCK_REALTIME);
		otel_thread_ctx_enter(s->trace, s->span, 1);
		work(300000);
		preempted = 0;
		switch (s->kind) {
		case K_SLEEP: s->blocked = wait_sleep(d); break;
		case K_USLEEP: s->blocked = wait_usleep(d); break;
		case K_FUTEX: s->blocked = wait_futex(d); break;
		case K_PIPE: s->blocked = wait_pipe(w, d); break;
		default: s->blocked = wait_pingpong(w); break;
		}
		s->preempted = preempted;
		otel_thread_ctx_leave();
		s->end = now_ns(CLOCK_REALTIME);
		w->n++;
		sleep_ns(1000000); /* off-CPU outside any span */
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
		fprintf(stderr, "usage: %s TRUTH_FILE SECONDS [WORKERS]\n", argv[0]);
		return 2;
	}
	double secs = atof(argv[2]);
	int nw = argc > 3 ? atoi(argv[3]) : 3;
	if (nw < 1 || nw > MAX_WORKERS) {
		fprintf(stderr, "workers must be 1..%d\n", MAX_WORKERS);
		return 2;
	}
	FILE *out = fopen(argv[1], "w");
	if (!out) {
		perror(argv[1]);
		return 1;
	}
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 1;

	static struct worker ws[MAX_WORKERS];
	pthread_t th[MAX_WORKERS], hs[MAX_WORKERS];
	uint64_t deadline = now_ns(CLOCK_MONOTONIC) + (uint64_t)(secs * 1e9);
	for (int i = 0; i < nw; i++) {
		ws[i].deadline = deadline;
		ws[i].seed = now_ns(CLOCK_REALTIME) ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
		if (pipe(ws[i].cmd) || pipe(ws[i].data)) {
			perror("pipe");
			return 1;
		}
		pthread_create(&hs[i], NULL, helper, &ws[i]);
		pthread_create(&th[i], NULL, run, &ws[i]);
	}
	int total = 0;
	for (int i = 0; i < nw; i++) {
		pthread_join(th[i], NULL);
		close(ws[i].cmd[1]);
		pthread_join(hs[i], NULL);
		for (int k = 0; k < ws[i].n; k++) {
			struct span *s = &ws[i].spans[k];
			fprintf(out, "%ld ", ws[i].tid);
			hex(out, s->trace, 16);
			fputc(' ', out);
			hex(out, s->span, 8);
			fprintf(out, " %llu %llu %s %llu %s %ld\n", (unsigned long long)s->start,
				(unsigned long long)s->end, kind_names[s->kind],
				(unsigned long long)s->blocked, fn_names[s->kind], s->preempted);
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
