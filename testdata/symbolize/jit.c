// jit.c plays a JIT compiler: it maps anonymous executable memory, copies
// two small machine-code functions into it, names them in
// /tmp/perf-PID.map the way V8 or perf-map-agent do, and runs them.
// A third copy is left out of the map: it must stay unnamed.
// Usage: jit SECONDS; prints "ready PID" once the map file is written.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

// push rbp; mov rbp,rsp; mov rcx,rdi; 1: dec rcx; jnz 1b; mov rax,rdi;
// pop rbp; ret -- with a frame, so the caller stays on the stack.
static const uint8_t spin_code[] = {
	0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf9, 0x48, 0xff, 0xc9,
	0x75, 0xfb, 0x48, 0x89, 0xf8, 0x5d, 0xc3,
};

typedef uint64_t (*spin_fn)(uint64_t);

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) uint64_t run_jit(spin_fn f, uint64_t n) { return f(n) + 1; }

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 5;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *mem = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE | PROT_EXEC,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	uint8_t *hot = mem + 0x100, *warm = mem + page + 0x40, *anon = mem + 2 * page;
	memcpy(hot, spin_code, sizeof spin_code);
	memcpy(warm, spin_code, sizeof spin_code);
	memcpy(anon, spin_code, sizeof spin_code);
	__builtin___clear_cache((char *)mem, (char *)mem + 4 * page);

	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		return 1;
	}
	fprintf(f, "%lx %zx LazyCompile:*hotLoop jit.js:10\n", (unsigned long)hot, sizeof spin_code);
	fprintf(f, "%lx %zx warmLoop\n", (unsigned long)warm, sizeof spin_code);
	fclose(f);
	printf("ready %d\n", getpid());
	fflush(stdout);

	uint64_t sink = 0;
	double end = now() + secs;
	while (now() < end) {
		sink += run_jit((spin_fn)hot, 2000000);
		sink += run_jit((spin_fn)warm, 1000000);
		sink += run_jit((spin_fn)anon, 1000000);
	}
	unlink(path);
	return (int)(sink & 1) * 0;
}
