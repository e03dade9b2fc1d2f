// inline.c is the DWARF fixture: functions inlined two deep into an
// out-of-line caller, so that file, line and inlined frames can be
// checked against addr2line -i.
#include <stdint.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))
#define INLINE static inline __attribute__((always_inline))

volatile uint64_t sink;

INLINE uint64_t mix(uint64_t x) {
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 29;
	return x;
}

INLINE uint64_t twice(uint64_t x) {
	uint64_t y = mix(x);
	sink += y;
	return mix(y + (uint64_t)sink);
}

NOINLINE uint64_t outer(uint64_t n) {
	uint64_t s = 0;
	for (uint64_t i = 0; i < n; i++)
		s += twice(i + s);
	return s;
}

int main(int argc, char **argv) {
	uint64_t n = argc > 1 ? strtoull(argv[1], 0, 10) : 1000;
	sink += outer(n);
	return 0;
}
