/* A shared library with a calling chain, built like a good dependency. */
#include <stdio.h>

__attribute__((noinline)) int lib_leaf(int x) { return x + 7; }

int lib_entry(int n)
{
	int s = lib_leaf(n);
	printf("%d\n", s);
	return s;
}
