/* A small program with a calling chain and a true leaf, so the checker
 * sees functions of both kinds. With "sleep" it waits, for the PID test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }

__attribute__((noinline)) int work(int n)
{
	int s = 0;
	for (int i = 0; i < n; i++)
		s += leaf(i) ^ (i << 1);
	printf("%d\n", s);
	return s;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "sleep") == 0) {
		for (;;)
			pause();
	}
	return work(argc > 1 ? atoi(argv[1]) : 10) == 0;
}
