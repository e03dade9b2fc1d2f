/* A process whose OTel thread context (OTEP 4947) lies in every way a
 * record can: the spanprof sampler must link only the honest phase.
 * Phases, each spinning in its own function with the TLS pointer set:
 *   liar_phase_good     valid record, trace 11..11 (the control)
 *   liar_phase_invalid  valid = 0, trace 22..22
 *   liar_phase_zero     valid = 1, trace all zero
 *   liar_phase_unmapped pointer to an unmapped address
 *   liar_phase_lying    valid = 1, trace 44..44, attrs_data_size 0xffff
 *   liar_phase_badvalid valid = 7, trace 55..55
 * Prints "ready PID", runs for the given seconds (default 30). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

__attribute__((visibility("default"))) __thread void *otel_thread_ctx_v1 = NULL;

struct rec {
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t valid;
	uint8_t trace_flags;
	uint16_t attrs_data_size;
	uint8_t attrs[612];
} __attribute__((packed, aligned(2)));

static struct rec good, invalid, zero, lying, badvalid;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void fill(struct rec *r, uint8_t b, uint8_t valid, uint16_t attrs)
{
	memset(r, 0, sizeof(*r));
	memset(r->trace_id, b, 16);
	memset(r->span_id, b, 8);
	r->valid = valid;
	r->trace_flags = 1;
	r->attrs_data_size = attrs;
}

static volatile unsigned long sink;

#define PHASE(name)                                                                  \
	__attribute__((noinline)) void name(void *rec, long long us)                     \
	{                                                                                \
		__atomic_store_n(&otel_thread_ctx_v1, rec, __ATOMIC_RELEASE);                \
		long long until = now_ns() + us * 1000;                                      \
		while (now_ns() < until)                                                     \
			for (int i = 0; i < 200; i++)                                            \
				sink += i;                                                           \
		__atomic_store_n(&otel_thread_ctx_v1, NULL, __ATOMIC_RELEASE);               \
	}

PHASE(liar_phase_good)
PHASE(liar_phase_invalid)
PHASE(liar_phase_zero)
PHASE(liar_phase_unmapped)
PHASE(liar_phase_lying)
PHASE(liar_phase_badvalid)

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 30;
	fill(&good, 0x11, 1, 0);
	fill(&invalid, 0x22, 0, 0);
	fill(&zero, 0x00, 1, 0);
	memset(zero.span_id, 0x33, 8);
	fill(&lying, 0x44, 1, 0xffff);
	fill(&badvalid, 0x55, 7, 0);
	printf("ready %d\n", getpid());
	fflush(stdout);
	long long end = now_ns() + (long long)(secs * 1e9);
	while (now_ns() < end) {
		liar_phase_good(&good, 2000);
		liar_phase_invalid(&invalid, 2000);
		liar_phase_zero(&zero, 2000);
		liar_phase_unmapped((void *)0x10, 2000);
		liar_phase_lying(&lying, 2000);
		liar_phase_badvalid(&badvalid, 2000);
	}
	return 0;
}
