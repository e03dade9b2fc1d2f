// chain.c is the symbolizer and unwinder fixture: a known call chain
// main -> a -> b -> c -> d -> leaf, a leaf that needs a stack frame
// (sub rsp), a C++-mangled name and a symbol whose size ends early.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

volatile uint64_t sink;

NOINLINE uint64_t leaf(uint64_t n) {
	uint64_t x = n;
	for (int i = 0; i < 1000; i++)
		x = x * 2862933555777941757ULL + 3037000493ULL;
	return x;
}

/* More locals than the 128-byte red zone: even a leaf must sub rsp. */
NOINLINE uint64_t leaf_stack(uint64_t n) {
	volatile uint64_t buf[64];
	for (int i = 0; i < 64; i++)
		buf[i] = n + (uint64_t)i;
	uint64_t s = 0;
	for (int i = 0; i < 64; i++)
		s += buf[i];
	return s;
}

/* The same without a frame pointer: CFA stays RSP-based after sub rsp. */
#ifdef __clang__
#define OMIT_FP
#else
#define OMIT_FP __attribute__((optimize("omit-frame-pointer")))
#endif
OMIT_FP NOINLINE uint64_t leaf_nofp(uint64_t n) {
	volatile uint64_t buf[64];
	for (int i = 0; i < 64; i++)
		buf[i] = n ^ (uint64_t)i;
	uint64_t s = 0;
	for (int i = 0; i < 64; i++)
		s += buf[i];
	return s;
}

/* A C++ name without a C++ compiler: spanprof::test::widen(int). */
NOINLINE int widen(int x) __asm__("_ZN8spanprof4test5widenEi");
NOINLINE int widen(int x) { return x * 3 + (int)sink; }

/* sized_stub is one byte long; the 31 bytes after it belong to no symbol. */
__asm__(".text\n"
	".p2align 4\n"
	".globl sized_stub\n"
	".type sized_stub,@function\n"
	"sized_stub:\n"
	"\tret\n"
	".size sized_stub, 1\n"
	".fill 31,1,0xcc\n");
void sized_stub(void);

NOINLINE uint64_t d(uint64_t n) { return leaf(n) + leaf_stack(n) + leaf_nofp(n) + 1; }
NOINLINE uint64_t c(uint64_t n) { return d(n) + 2; }
NOINLINE uint64_t b(uint64_t n) { return c(n) + 3; }
NOINLINE uint64_t a(uint64_t n) { return b(n) + (uint64_t)widen((int)n); }

/* With "addrs" the program prints its function addresses and waits for
 * stdin to close, so a test can symbolize it as a live process. */
int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "addrs") == 0) {
		printf("leaf %p\nleaf_stack %p\nleaf_nofp %p\nd %p\nc %p\nb %p\na %p\nmain %p\nsized_stub %p\n",
		       (void *)leaf, (void *)leaf_stack, (void *)leaf_nofp, (void *)d, (void *)c,
		       (void *)b, (void *)a, (void *)main, (void *)sized_stub);
		fflush(stdout);
		char buf[16];
		while (fread(buf, 1, sizeof buf, stdin) > 0) {
		}
		return 0;
	}
	long iters = argc > 1 ? atol(argv[1]) : 1;
	for (long i = 0; i < iters; i++)
		sink += a((uint64_t)i);
	return 0;
}
