/* A short-lived process: burns CPU in churn_child_spin for about the given
 * number of microseconds (default 500), then exits. Its samples must come
 * out symbolized although the process is gone before anyone reads them. */
#include <stdlib.h>
#include <time.h>

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) unsigned long churn_child_spin(long long until)
{
	volatile unsigned long x = 0;
	while (now_ns() < until)
		for (int i = 0; i < 1000; i++)
			x += i;
	return x;
}

__attribute__((noinline)) unsigned long churn_child_work(long us)
{
	return churn_child_spin(now_ns() + us * 1000LL);
}

int main(int argc, char **argv)
{
	long us = argc > 1 ? atol(argv[1]) : 500;
	return churn_child_work(us) == 1; /* never 1: keeps the result live */
}
