// sdk_check.cc - checks the writer's semantics from C++ (which also proves
// the header compiles as C++): nesting restores the parent's record, deeper
// than OTEL_THREAD_CTX_MAX_DEPTH leaves publish NULL instead of a wrong
// parent, attributes stay within 640 bytes, and a published record is never
// written again while published. Exits 0 on success.
#define OTEL_THREAD_CTX_IMPLEMENTATION
#define OTEL_THREAD_CTX_SPANPROF_HOOK
#include "otel_thread_ctx.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

static int failures;
#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                          \
		}                                                            \
	} while (0)

static const otel_thread_ctx_record *cur()
{
	return static_cast<const otel_thread_ctx_record *>(otel_thread_ctx_v1);
}

static void ids(uint8_t n, uint8_t *trace, uint8_t *span)
{
	std::memset(trace, n, 16);
	std::memset(span, n, 8);
}

int main()
{
	uint8_t t[16], s[8];
	CHECK(cur() == nullptr);

	// Nesting restores parents.
	for (uint8_t i = 1; i <= 3; i++) {
		ids(i, t, s);
		CHECK(otel_thread_ctx_enter(t, s, i) == 0);
		CHECK(cur() && cur()->trace_id[0] == i && cur()->valid == 1 && cur()->trace_flags == i);
	}
	const otel_thread_ctx_record *level3 = cur();
	otel_thread_ctx_leave();
	CHECK(cur() && cur()->span_id[7] == 2);
	// A sibling at level 3 must not write the record a reader may still hold.
	ids(9, t, s);
	otel_thread_ctx_enter(t, s, 0);
	CHECK(cur() != level3 && level3->trace_id[0] == 3);
	otel_thread_ctx_leave();
	otel_thread_ctx_leave();
	CHECK(cur() && cur()->trace_id[0] == 1);
	otel_thread_ctx_leave();
	CHECK(cur() == nullptr);
	otel_thread_ctx_leave(); // unbalanced leave is harmless
	CHECK(cur() == nullptr);

	// Overflow: beyond the stack, leaving into a lost level publishes NULL,
	// and levels below it come back intact.
	const int depth = OTEL_THREAD_CTX_MAX_DEPTH + 3;
	for (int i = 1; i <= depth; i++) {
		ids((uint8_t)i, t, s);
		otel_thread_ctx_enter(t, s, 0);
		CHECK(cur() && cur()->trace_id[0] == i);
	}
	for (int i = depth - 1; i >= 1; i--) {
		otel_thread_ctx_leave();
		if (i >= OTEL_THREAD_CTX_MAX_DEPTH)
			CHECK(cur() == nullptr);
		else
			CHECK(cur() && cur()->trace_id[0] == i);
	}
	otel_thread_ctx_leave();
	CHECK(cur() == nullptr);

	// Attributes: appended by copy-and-publish, bounded to 640 bytes.
	CHECK(otel_thread_ctx_set_attr(0, "x", 1) == -1); // no span
	ids(7, t, s);
	otel_thread_ctx_enter(t, s, 1);
	const otel_thread_ctx_record *before = cur();
	CHECK(otel_thread_ctx_set_attr(2, "GET", 3) == 0);
	CHECK(cur() != before && cur()->attrs_data_size == 5 && cur()->attrs_data[0] == 2 &&
	      cur()->attrs_data[1] == 3 && std::memcmp(&cur()->attrs_data[2], "GET", 3) == 0);
	CHECK(cur()->trace_id[0] == 7);
	char big[255];
	std::memset(big, 'a', sizeof big);
	CHECK(otel_thread_ctx_set_attr(1, big, 255) == 0); // 5+257 = 262
	CHECK(otel_thread_ctx_set_attr(1, big, 255) == 0); // 519
	CHECK(otel_thread_ctx_set_attr(1, big, 92) == -1); // 519+94 = 613 > 612
	CHECK(otel_thread_ctx_set_attr(1, big, 91) == 0);  // exactly 612
	CHECK(cur()->attrs_data_size == OTEL_THREAD_CTX_ATTRS_MAX);
	CHECK(otel_thread_ctx_set_attr(1, big, 256) == -1);
	otel_thread_ctx_reset();
	CHECK(cur() == nullptr);

	// Process context publishes and updates.
	otel_process_ctx_attr attrs[] = {{"service.name", "sdk-check"}};
	CHECK(otel_process_ctx_publish(attrs, 1, nullptr, 0) == 0);
	CHECK(otel_process_ctx_publish(attrs, 1, nullptr, 0) == 0);
	CHECK(otel_process_ctx_drop() == 0);

	spanprof_set_trace_context(nullptr, nullptr);
	if (failures)
		return 1;
	std::puts("ok");
	return 0;
}
