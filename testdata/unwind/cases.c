/* Fixture of the hybrid unwinding test (test/e2e/unwind_test.go): one
 * thread per case, each spending its time in a case function that calls
 * into Debian's glibc (or libstdc++), which has no frame pointers. The
 * thread's name is its case; the case function is named case_<name>.
 *
 * Usage: cases SECONDS THREADS_FILE. Writes a line "TID NAME" per case
 * thread to THREADS_FILE once all run, prints "pid PID", then runs
 * every case for SECONDS and exits. Deterministic: no randomness, fixed
 * sizes. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile int stop;
volatile uint64_t sink;

/* The C++ cases (cases_cxx.cc). */
void *cxx_mutex_thread(void *);
void *cxx_cond_thread(void *);
void *cxx_mutex_holder(void *);
extern volatile int cxx_stop;

/* mutex: a lock another thread holds most of the time. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

NOINLINE static void case_mutex(void)
{
	while (!stop) {
		pthread_mutex_lock(&lock);
		sink++;
		pthread_mutex_unlock(&lock);
	}
}

NOINLINE static void hold_lock(void)
{
	struct timespec ts = {0, 2000000};
	while (!stop) {
		pthread_mutex_lock(&lock);
		clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
		pthread_mutex_unlock(&lock);
		sched_yield();
	}
}

NOINLINE static void case_cond(void)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t c = PTHREAD_COND_INITIALIZER;
	pthread_mutex_lock(&m);
	while (!stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 2000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&c, &m, &ts);
	}
	pthread_mutex_unlock(&m);
}

NOINLINE static void case_usleep(void)
{
	while (!stop)
		usleep(2000);
}

static int pipefd[2];

NOINLINE static void case_read(void)
{
	char buf[64];
	while (!stop)
		if (read(pipefd[0], buf, sizeof buf) <= 0)
			break;
}

NOINLINE static void feed_pipe(void)
{
	struct timespec ts = {0, 2000000};
	while (!stop) {
		clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
		if (write(pipefd[1], "x", 1) != 1)
			break;
	}
	close(pipefd[1]);
}

NOINLINE static void case_malloc(void)
{
	void *p[64];
	while (!stop) {
		for (int i = 0; i < 64; i++)
			p[i] = malloc(16 + (size_t)i * 40);
		for (int i = 0; i < 64; i++)
			free(p[i]);
	}
}

NOINLINE static int compare_ints(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

NOINLINE static void case_qsort(void)
{
	static int v[512];
	while (!stop) {
		for (int i = 0; i < 512; i++)
			v[i] = (i * 7919) % 1021;
		qsort(v, 512, sizeof v[0], compare_ints);
	}
}

NOINLINE static void case_snprintf(void)
{
	char buf[128];
	unsigned n = 0;
	while (!stop) {
		snprintf(buf, sizeof buf, "%s %u %08x %.3f", "span", n, n * 2654435761u, n / 7.0);
		sink += (unsigned char)buf[6];
		n++;
	}
}

static void *child(void *arg)
{
	(void)arg;
	struct timespec ts = {0, 2000000};
	clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
	return NULL;
}

NOINLINE static void case_join(void)
{
	while (!stop) {
		pthread_t t;
		if (pthread_create(&t, NULL, child, NULL))
			break;
		pthread_join(t, NULL);
	}
}

NOINLINE static void case_poll(void)
{
	int fd[2];
	if (pipe(fd))
		return;
	struct pollfd p = {fd[0], POLLIN, 0};
	while (!stop)
		poll(&p, 1, 2);
}

NOINLINE static void case_epoll(void)
{
	int fd[2], ep = epoll_create1(0);
	if (ep < 0 || pipe(fd))
		return;
	struct epoll_event ev = {.events = EPOLLIN}, out;
	epoll_ctl(ep, EPOLL_CTL_ADD, fd[0], &ev);
	while (!stop)
		epoll_wait(ep, &out, 1, 2);
}

NOINLINE static void case_fwrite(void)
{
	FILE *f = fopen("/dev/null", "w");
	char line[100];
	memset(line, 'a', sizeof line);
	if (!f)
		return;
	while (!stop)
		fwrite(line, 1, sizeof line, f);
	fclose(f);
}

/* clock_gettime through glibc (frameless) into the vDSO, whose x86-64
 * functions keep a frame pointer: a sample at their first instruction or
 * after the epilogue's pop has the case's rbp, and the kernel's chain
 * skips glibc's frame and the case's. */
NOINLINE static void case_clock(void)
{
	struct timespec ts;
	while (!stop) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		sink += (unsigned long)ts.tv_nsec;
	}
}

NOINLINE static void case_memcpy(void)
{
	size_t n = 4 << 20;
	char *a = malloc(n), *b = malloc(n);
	memset(a, 1, n);
	while (!stop) {
		memcpy(b, a, n);
		sink += (unsigned char)b[n / 2];
	}
	free(a);
	free(b);
}

struct thread_case {
	const char *name; /* the thread's name: "c-" and the case */
	void (*fn)(void);
	void *(*entry)(void *); /* a thread function of its own (C++) */
};

static long tids[32];
static pthread_barrier_t started;

static void *run_case(void *arg)
{
	const struct thread_case *c = arg;
	c->fn();
	return NULL;
}

/* Every case thread starts here: it says its tid and waits for the others,
 * so that THREADS_FILE is complete before the cases run. */
static const struct thread_case cases[];
static void *start_case(void *arg)
{
	const struct thread_case *c = arg;
	tids[c - cases] = syscall(SYS_gettid);
	pthread_setname_np(pthread_self(), c->name);
	pthread_barrier_wait(&started);
	void *r = c->entry ? c->entry(arg) : run_case(arg);
	/* Not a tail call (gcc and clang made the C++ entry's one): start_case
	 * stays under every case's function, where the arm64 guest, whose
	 * glibc names none of its functions, tells the thread's entry by it
	 * (test/kernels, threadEntry). */
	__asm__ volatile("" : : "r"(r) : "memory");
	return r;
}

static const struct thread_case cases[] = {
	{"c-mutex", case_mutex, 0},       {"c-holder", hold_lock, 0},
	{"c-cond", case_cond, 0},         {"c-usleep", case_usleep, 0},
	{"c-read", case_read, 0},         {"c-feeder", feed_pipe, 0},
	{"c-malloc", case_malloc, 0},     {"c-qsort", case_qsort, 0},
	{"c-snprintf", case_snprintf, 0}, {"c-join", case_join, 0},
	{"c-poll", case_poll, 0},         {"c-epoll", case_epoll, 0},
	{"c-fwrite", case_fwrite, 0},     {"c-memcpy", case_memcpy, 0},
	{"c-cxxmutex", 0, cxx_mutex_thread}, {"c-cxxholder", 0, cxx_mutex_holder},
	{"c-cxxcond", 0, cxx_cond_thread}, {"c-clock", case_clock, 0},
};
#define NCASES (sizeof cases / sizeof cases[0])

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s SECONDS THREADS_FILE\n", argv[0]);
		return 2;
	}
	double secs = atof(argv[1]);
	if (pipe(pipefd))
		return 1;
	pthread_t t[NCASES];
	pthread_barrier_init(&started, NULL, NCASES + 1);
	for (size_t i = 0; i < NCASES; i++) {
		if (pthread_create(&t[i], NULL, start_case, (void *)&cases[i])) {
			perror("pthread_create");
			return 1;
		}
	}
	pthread_barrier_wait(&started);
	FILE *f = fopen(argv[2], "w");
	if (!f) {
		perror(argv[2]);
		return 1;
	}
	for (size_t i = 0; i < NCASES; i++)
		fprintf(f, "%ld %s\n", tids[i], cases[i].name);
	fclose(f);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	struct timespec ts = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
	stop = 1;
	cxx_stop = 1;
	for (size_t i = 0; i < NCASES; i++)
		pthread_join(t[i], NULL);
	return 0;
}
