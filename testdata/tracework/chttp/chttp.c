/* chttp: the C service of the two-service trace example. An HTTP/1.0
 * server on loopback: for "GET /work?cpu_ms=N&sleep_ms=M" with a W3C
 * traceparent header it starts a span of its own under the caller's span,
 * publishes it with sdk/c (otel_thread_ctx_enter), burns N ms of thread CPU
 * time, sleeps M ms in nanosleep, leaves the span and answers with it:
 *   SPAN_ID_HEX START_UNIX_NS END_UNIX_NS CPU_NS SLEEP_NS
 * Before answering it exports the span itself, as OTLP/HTTP JSON to
 * $OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces (http://HOST:PORT, as the
 * OpenTelemetry SDKs read it; otlp_export.h), with service.name c-service;
 * a failed export fails the request, so no span is lost unseen.
 * Prints "ready PID PORT" once listening. Build with -rdynamic. */
#define OTEL_THREAD_CTX_IMPLEMENTATION
#include "otel_thread_ctx.h"
#include "../worktime.h"
#include "otlp_export.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

__attribute__((noinline)) static void c_burn(int64_t cpu_ns)
{
	int64_t end = now_ns(CLOCK_THREAD_CPUTIME_ID) + cpu_ns;
	while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		for (int i = 0; i < 10000; i++)
			sink = sink * 6364136223846793005ULL + 1;
}

__attribute__((noinline)) static int64_t c_rest(int64_t ns)
{
	struct timespec ts = {ns / 1000000000, ns % 1000000000};
	int64_t t = now_ns(CLOCK_MONOTONIC);
	nanosleep(&ts, NULL);
	return now_ns(CLOCK_MONOTONIC) - t;
}

static int unhex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (uint8_t)v;
	}
	return 0;
}

/* parse_traceparent reads "00-TRACE32-SPAN16-FLAGS2" (version 00). */
static int parse_traceparent(const char *v, uint8_t tid[16], uint8_t psid[8])
{
	while (*v == ' ')
		v++;
	if (strncmp(v, "00-", 3) || strlen(v) < 55 || v[35] != '-' || v[52] != '-')
		return -1;
	return unhex(v + 3, tid, 16) || unhex(v + 36, psid, 8) ? -1 : 0;
}

static struct otlp_exporter exporter;

static void reply(int fd, int code, const char *body)
{
	char head[128];
	int n = snprintf(head, sizeof head, "HTTP/1.0 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n\r\n",
			 code, code == 200 ? "OK" : code == 400 ? "Bad Request" : "Internal Server Error", strlen(body));
	if (write(fd, head, (size_t)n) < 0 || write(fd, body, strlen(body)) < 0)
		perror("chttp: write");
}

static void handle(int fd)
{
	char req[8192];
	size_t n = 0;
	while (n < sizeof req - 1) {
		ssize_t r = read(fd, req + n, sizeof req - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		req[n] = 0;
		if (strstr(req, "\r\n\r\n"))
			break;
	}
	req[n] = 0;
	long cpu_ms = -1, sleep_ms = -1;
	if (sscanf(req, "GET /work?cpu_ms=%ld&sleep_ms=%ld ", &cpu_ms, &sleep_ms) != 2 || cpu_ms < 0 || sleep_ms < 0) {
		reply(fd, 400, "want GET /work?cpu_ms=N&sleep_ms=M\n");
		return;
	}
	uint8_t tid[16], psid[8], sid[8];
	const char *h = NULL;
	for (char *l = strstr(req, "\r\n"); l; l = strstr(l + 2, "\r\n"))
		if (!strncasecmp(l + 2, "traceparent:", 12)) {
			h = l + 14;
			break;
		}
	if (!h || parse_traceparent(h, tid, psid)) {
		reply(fd, 400, "want a W3C traceparent header (version 00)\n");
		return;
	}
	for (int i = 0; i < 8; i++)
		sid[i] = (uint8_t)rand();
	int64_t start = now_ns(CLOCK_REALTIME);
	otel_thread_ctx_enter(tid, sid, 1);
	int64_t r0 = running_ns(), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	c_burn(cpu_ms * 1000000);
	int64_t cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0, run = running_ns() - r0;
	int64_t slept = c_rest(sleep_ms * 1000000);
	otel_thread_ctx_leave();
	int64_t end = now_ns(CLOCK_REALTIME);
	struct otlp_span sp = {.name = "GET /work", .kind = 2, .start_ns = start, .end_ns = end};
	memcpy(sp.trace_id, tid, 16);
	memcpy(sp.span_id, sid, 8);
	memcpy(sp.parent_span_id, psid, 8);
	char err[256];
	if (otlp_export(&exporter, &sp, err, sizeof err)) {
		fprintf(stderr, "chttp: export span: %s\n", err);
		char msg[300];
		snprintf(msg, sizeof msg, "export span: %s\n", err);
		reply(fd, 500, msg);
		return;
	}
	char body[128];
	int o = 0;
	for (int i = 0; i < 8; i++)
		o += snprintf(body + o, sizeof body - (size_t)o, "%02x", sid[i]);
	snprintf(body + o, sizeof body - (size_t)o, " %lld %lld %lld %lld %lld\n", (long long)start, (long long)end,
		 (long long)cpu, (long long)slept, (long long)run);
	reply(fd, 200, body);
}

int main(void)
{
	otel_process_ctx_attr res[] = {{"service.name", "c-service"}};
	otel_process_ctx_publish(res, 1, NULL, 0);
	char err[256];
	if (otlp_exporter_init(&exporter, getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "c-service", err, sizeof err)) {
		fprintf(stderr, "chttp: %s\n", err);
		return 1;
	}
	srand((unsigned)now_ns(CLOCK_REALTIME));
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 16) || getsockname(ls, (struct sockaddr *)&a, &al)) {
		perror("chttp: listen on loopback");
		return 1;
	}
	printf("ready %d %d\n", (int)getpid(), ntohs(a.sin_port));
	fflush(stdout);
	for (;;) {
		int fd = accept(ls, NULL, NULL);
		if (fd < 0) {
			perror("chttp: accept");
			return 1;
		}
		handle(fd);
		close(fd);
	}
}
