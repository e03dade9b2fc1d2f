/* Process churn: fork+exec CHILD at RATE processes per second for SECONDS
 * (each child burning CHILD_US microseconds of CPU), reaping as it goes.
 * Prints "ready PID" first, then "spawned N in S seconds" at the end.
 *   churn CHILD RATE SECONDS CHILD_US */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: churn CHILD RATE SECONDS CHILD_US\n");
		return 2;
	}
	double rate = atof(argv[2]), secs = atof(argv[3]);
	char *cargv[] = {argv[1], argv[4], NULL};
	printf("ready %d\n", getpid());
	fflush(stdout);

	double start = now_s(), end = start + secs;
	long spawned = 0, failed = 0, running = 0;
	while (now_s() < end) {
		double due = start + spawned / rate;
		double t = now_s();
		if (t < due) {
			struct timespec d = {0, (long)((due - t) * 1e9)};
			nanosleep(&d, NULL);
		}
		pid_t pid;
		/* Cap the children alive at once so a slow machine queues
		 * rather than forks without bound. */
		while (running >= 64 && waitpid(-1, NULL, 0) > 0)
			running--;
		if (posix_spawn(&pid, argv[1], NULL, NULL, cargv, environ) == 0) {
			spawned++;
			running++;
		} else {
			failed++;
		}
		while (running > 0 && waitpid(-1, NULL, WNOHANG) > 0)
			running--;
	}
	while (waitpid(-1, NULL, 0) > 0)
		;
	printf("spawned %ld failed %ld in %.2f seconds\n", spawned, failed, now_s() - start);
	return 0;
}
