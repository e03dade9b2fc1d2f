/* fanout.c - many mostly idle processes, for the profiler's scale benchmark.
 *
 *   fanout NPROC NTHREADS SECONDS [WORK_US PERIOD_MS [BINDIR]]
 *
 * Forks NPROC processes of NTHREADS threads each. Every thread sleeps
 * PERIOD_MS (default 500) and then spins WORK_US (default 100) inside a
 * short frame-pointer call chain, so the machine stays mostly idle while
 * every process keeps showing up in on-CPU and off-CPU samples. With
 * BINDIR, child i execs BINDIR/fanout-<i> (distinct copies, e.g. with
 * patched build IDs, so the profiler sees NPROC distinct executables);
 * otherwise the children are forks of this binary. The parent prints
 * "ready <pid>" once every child runs its threads, and waits for them. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;
static long work_ns = 100000, period_ns = 500000000L;
static long long end_ns;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

NOINLINE void spin(long long until)
{
	unsigned long x = sink;
	while (now_ns() < until)
		for (int i = 0; i < 1000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
}

NOINLINE void work(void) { spin(now_ns() + work_ns); sink++; }

static void *thread_main(void *arg)
{
	/* Spread the wake-ups over the period. */
	unsigned seed = (unsigned)(long)arg * 2654435761u ^ (unsigned)getpid();
	long first = (long)(rand_r(&seed) % (unsigned)(period_ns / 1000)) * 1000;
	struct timespec ts = {first / 1000000000L, first % 1000000000L};
	nanosleep(&ts, NULL);
	while (now_ns() < end_ns) {
		work();
		ts.tv_sec = period_ns / 1000000000L;
		ts.tv_nsec = period_ns % 1000000000L;
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static int child(int nthreads, int ready_fd)
{
	pthread_t *th = calloc((size_t)nthreads, sizeof(*th));
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	for (long i = 0; i < nthreads; i++)
		if (pthread_create(&th[i], &attr, thread_main, (void *)i))
			return 1;
	if (ready_fd >= 0) {
		char c = 1;
		if (write(ready_fd, &c, 1) != 1)
			return 1;
		close(ready_fd);
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	return 0;
}

int main(int argc, char **argv)
{
	/* Child mode after exec: fanout --child NTHREADS END_NS WORK_NS PERIOD_NS READY_FD */
	if (argc == 7 && strcmp(argv[1], "--child") == 0) {
		end_ns = atoll(argv[3]);
		work_ns = atol(argv[4]);
		period_ns = atol(argv[5]);
		return child(atoi(argv[2]), atoi(argv[6]));
	}
	if (argc < 4) {
		fprintf(stderr, "usage: %s NPROC NTHREADS SECONDS [WORK_US PERIOD_MS [BINDIR]]\n", argv[0]);
		return 2;
	}
	int nproc = atoi(argv[1]), nthreads = atoi(argv[2]);
	end_ns = now_ns() + atoll(argv[3]) * 1000000000LL;
	if (argc > 5) {
		work_ns = atol(argv[4]) * 1000L;
		period_ns = atol(argv[5]) * 1000000L;
	}
	const char *bindir = argc > 6 ? argv[6] : NULL;
	int ready[2];
	if (pipe(ready))
		return 1;
	for (int i = 0; i < nproc; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			close(ready[0]);
			if (!bindir)
				_exit(child(nthreads, ready[1]));
			char path[4096], a[5][32];
			snprintf(path, sizeof(path), "%s/fanout-%d", bindir, i);
			snprintf(a[0], 32, "%d", nthreads);
			snprintf(a[1], 32, "%lld", end_ns);
			snprintf(a[2], 32, "%ld", work_ns);
			snprintf(a[3], 32, "%ld", period_ns);
			snprintf(a[4], 32, "%d", ready[1]);
			execl(path, path, "--child", a[0], a[1], a[2], a[3], a[4], (char *)NULL);
			perror(path);
			_exit(1);
		}
	}
	close(ready[1]);
	char c;
	for (int i = 0; i < nproc; i++)
		if (read(ready[0], &c, 1) != 1) {
			fprintf(stderr, "fanout: a child failed to start\n");
			kill(0, SIGTERM);
			return 1;
		}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	int status, rc = 0;
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			rc = 1;
	return rc;
}
