/* deep.c - a CPU-bound frame-pointer workload with a deep call stack, for
 * the cost of stack sampling as stacks grow (make bench).
 *
 *   deep DEPTH CALLS
 *
 * Recurses DEPTH frames of about 100 bytes each (about the size of a
 * server's frames), then runs CALLS rounds of a busy leaf at the bottom,
 * and prints "elapsed_ns N". The chain fixture's stacks are 9 frames deep;
 * services usually run 20 to 60. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

NOINLINE static void leaf(unsigned long n)
{
	unsigned long x = sink;

	for (unsigned long i = 0; i < n; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
}

NOINLINE static void descend(int depth, long calls)
{
	volatile char frame[80]; /* a frame of a realistic size */

	frame[0] = (char)depth;
	if (depth > 0) {
		descend(depth - 1, calls);
	} else {
		while (calls-- > 0)
			leaf(200000);
	}
	sink += frame[0];
}

int main(int argc, char **argv)
{
	int depth = argc > 1 ? atoi(argv[1]) : 40;
	long calls = argc > 2 ? atol(argv[2]) : 20000;
	long long t0 = now_ns();

	descend(depth, calls);
	printf("elapsed_ns %lld\n", now_ns() - t0);
	return 0;
}
