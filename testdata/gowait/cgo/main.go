// Command cgo is a fixture of the goroutine-wait sampler: one goroutine
// parks inside a Go callback called from C (through glibc's qsort, which
// has no frame pointers), so its wait has C frames between Go frames, and
// one goroutine blocks in a C call to glibc's sleep (_Gsyscall).
package main

/*
#include <stdlib.h>
#include <unistd.h>

extern int goCompare(void *a, void *b);

static int cmp(const void *a, const void *b) { return goCompare((void *)a, (void *)b); }

__attribute__((noinline)) static void sortWithCallback(void) {
	int v[2] = {2, 1};
	qsort(v, 2, sizeof v[0], cmp);
}

static void blockInSleep(void) { sleep(1000); }
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"
)

var park = make(chan struct{})

//export goCompare
func goCompare(a, b unsafe.Pointer) C.int {
	parkedInCallback()
	return C.int(*(*C.int)(a) - *(*C.int)(b))
}

//go:noinline
func parkedInCallback() { <-park }

//go:noinline
func callFromGo() { C.sortWithCallback() }

//go:noinline
func sleepInC() { C.blockInSleep() }

func main() {
	go sleepInC()
	go callFromGo()
	for runtime.NumCgoCall() < 3 {
		runtime.Gosched()
	}
	fmt.Println("ready", os.Getpid())
	select {}
}
