/* otlp_export.h: a minimal OTLP/HTTP JSON trace exporter for the C
 * service of the two-service example: one span per request, POSTed to
 * ENDPOINT/v1/traces over plain HTTP/1.1 on a fresh connection, answered
 * with 200 by a collector's otlp receiver. Enough for the example; a real
 * service would batch and retry (the OpenTelemetry C++ SDK does). */
#ifndef OTLP_EXPORT_H
#define OTLP_EXPORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct otlp_exporter {
	struct sockaddr_in addr;
	char host[64];
	char service[64];
};

struct otlp_span {
	uint8_t trace_id[16], span_id[8], parent_span_id[8];
	const char *name; /* JSON-safe: no quotes or backslashes */
	int kind;	  /* OTLP SpanKind: 2 is SERVER */
	int64_t start_ns, end_ns;
};

/* otlp_exporter_init parses "http://IPV4:PORT" (a trailing slash allowed).
 * Returns 0, or -1 with a message in err. */
static int otlp_exporter_init(struct otlp_exporter *e, const char *endpoint, const char *service, char *err, size_t errlen)
{
	memset(e, 0, sizeof *e);
	unsigned port = 0;
	char ip[32] = {0};
	if (!endpoint || sscanf(endpoint, "http://%31[0-9.]:%u", ip, &port) != 2 || port == 0 || port > 65535 ||
	    inet_pton(AF_INET, ip, &e->addr.sin_addr) != 1) {
		snprintf(err, errlen, "OTEL_EXPORTER_OTLP_ENDPOINT %s: want http://IPV4:PORT", endpoint ? endpoint : "(unset)");
		return -1;
	}
	e->addr.sin_family = AF_INET;
	e->addr.sin_port = htons((uint16_t)port);
	snprintf(e->host, sizeof e->host, "%s:%u", ip, port);
	snprintf(e->service, sizeof e->service, "%s", service);
	return 0;
}

static void otlp_hex(char *out, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* otlp_export sends one span and waits for the receiver's answer. Returns
 * 0 on a 200, or -1 with the reason in err. */
static int otlp_export(const struct otlp_exporter *e, const struct otlp_span *s, char *err, size_t errlen)
{
	char tid[33], sid[17], psid[17], body[2048], req[2560];
	otlp_hex(tid, s->trace_id, 16);
	otlp_hex(sid, s->span_id, 8);
	otlp_hex(psid, s->parent_span_id, 8);
	/* OTLP/JSON: ids in hex, 64-bit times as decimal strings. */
	int bn = snprintf(body, sizeof body,
			  "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\",\"value\":{\"stringValue\":\"%s\"}}]},"
			  "\"scopeSpans\":[{\"scope\":{\"name\":\"chttp\"},\"spans\":[{\"traceId\":\"%s\",\"spanId\":\"%s\",\"parentSpanId\":\"%s\","
			  "\"name\":\"%s\",\"kind\":%d,\"startTimeUnixNano\":\"%lld\",\"endTimeUnixNano\":\"%lld\"}]}]}]}",
			  e->service, tid, sid, psid, s->name, s->kind, (long long)s->start_ns, (long long)s->end_ns);
	int rn = snprintf(req, sizeof req,
			  "POST /v1/traces HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
			  "Connection: close\r\n\r\n%s",
			  e->host, bn, body);
	if (bn >= (int)sizeof body || rn >= (int)sizeof req) {
		snprintf(err, errlen, "span too large for the exporter's buffer");
		return -1;
	}
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (const struct sockaddr *)&e->addr, sizeof e->addr)) {
		snprintf(err, errlen, "connect to %s: %m", e->host);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	for (int off = 0; off < rn;) {
		ssize_t w = write(fd, req + off, (size_t)(rn - off));
		if (w <= 0) {
			snprintf(err, errlen, "send to %s: %m", e->host);
			close(fd);
			return -1;
		}
		off += (int)w;
	}
	char resp[512];
	size_t n = 0;
	while (n < sizeof resp - 1) {
		ssize_t r = read(fd, resp + n, sizeof resp - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	resp[n] = 0;
	int code = 0;
	if (sscanf(resp, "HTTP/1.%*d %d", &code) != 1 || code != 200) {
		char *eol = strstr(resp, "\r\n");
		if (eol)
			*eol = 0;
		snprintf(err, errlen, "POST http://%s/v1/traces: %.120s", e->host, n ? resp : "no answer");
		return -1;
	}
	return 0;
}

#endif
