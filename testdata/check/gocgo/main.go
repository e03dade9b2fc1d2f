// A cgo program whose C part is built without frame pointers (the test
// sets CGO_CFLAGS=-fomit-frame-pointer): the checker must flag the C
// function and leave the Go functions alone.
package main

/*
#include <stdio.h>
__attribute__((noinline)) int c_work(int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += i * 7;
	printf("%d\n", s);
	return s;
}
*/
import "C"

func main() { C.c_work(10) }
