/* cservice: the C side of the trace view test. For each line
 * "TRACE_ID_HEX PARENT_SPAN_HEX CPU_MS SLEEP_MS" on stdin it starts a span of
 * its own under that parent, publishes it with sdk/c, burns CPU_MS of thread
 * CPU time, sleeps SLEEP_MS in nanosleep, leaves the span and prints the
 * ground truth:
 *   span SPAN_ID_HEX START_UNIX_NS END_UNIX_NS CPU_NS SLEEP_NS RUN_NS
 * where RUN_NS is the time the burn was current on a CPU (running_ns).
 * Build with -rdynamic: the profiler finds otel_thread_ctx_v1 in .dynsym.
 * The test exports that span through the OpenTelemetry SDK on its behalf. */
#define OTEL_THREAD_CTX_IMPLEMENTATION
#include "otel_thread_ctx.h"
#include "../worktime.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int unhex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (sscanf(s + 2 * i, "%2hhx", &out[i]) != 1)
			return -1;
	return 0;
}

static volatile uint64_t sink;

__attribute__((noinline)) static void burn(int64_t cpu_ns)
{
	int64_t end = now_ns(CLOCK_THREAD_CPUTIME_ID) + cpu_ns;
	while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		for (int i = 0; i < 10000; i++)
			sink = sink * 6364136223846793005ULL + 1;
}

__attribute__((noinline)) static int64_t rest(int64_t ns)
{
	struct timespec ts = {ns / 1000000000, ns % 1000000000};
	int64_t t = now_ns(CLOCK_MONOTONIC);
	nanosleep(&ts, NULL);
	return now_ns(CLOCK_MONOTONIC) - t;
}

int main(void)
{
	otel_process_ctx_attr res[] = {{"service.name", "c-service"}};
	otel_process_ctx_publish(res, 1, NULL, 0);
	srand((unsigned)now_ns(CLOCK_REALTIME));
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	char trace[33], parent[17];
	long cpu_ms, sleep_ms;
	while (scanf("%32s %16s %ld %ld", trace, parent, &cpu_ms, &sleep_ms) == 4) {
		uint8_t tid[16], sid[8];
		if (unhex(trace, tid, 16))
			return 1;
		for (int i = 0; i < 8; i++)
			sid[i] = (uint8_t)rand();
		int64_t start = now_ns(CLOCK_REALTIME);
		otel_thread_ctx_enter(tid, sid, 1);
		int64_t r0 = running_ns(), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
		burn(cpu_ms * 1000000);
		int64_t cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0, run = running_ns() - r0;
		int64_t slept = rest(sleep_ms * 1000000);
		otel_thread_ctx_leave();
		int64_t end = now_ns(CLOCK_REALTIME);
		printf("span ");
		for (int i = 0; i < 8; i++)
			printf("%02x", sid[i]);
		printf(" %lld %lld %lld %lld %lld\n", (long long)start, (long long)end, (long long)cpu, (long long)slept,
		       (long long)run);
		fflush(stdout);
	}
	return 0;
}
