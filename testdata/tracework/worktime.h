/* worktime.h: the clocks the trace-view fixtures measure their known work
 * with (cservice, chttp). */
#ifndef WORKTIME_H
#define WORKTIME_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* running_ns is the monotonic clock less the time this thread has waited
 * runnable (run_delay, the second field of /proc/thread-self/schedstat).
 * Its difference over busy work is the time the thread was current on a
 * CPU: what a CPU-clock sampler sees. Thread CPU time is less by the
 * interrupt and steal time the kernel does not charge to the thread, which
 * on a virtual machine can be a tenth of a short burst. */
static int64_t running_ns(void)
{
	long long exec_ns, delay_ns;
	FILE *f = fopen("/proc/thread-self/schedstat", "r");
	if (!f || fscanf(f, "%lld %lld", &exec_ns, &delay_ns) != 2) {
		perror("read /proc/thread-self/schedstat");
		exit(1);
	}
	fclose(f);
	return now_ns(CLOCK_MONOTONIC) - (int64_t)delay_ns;
}

#endif
