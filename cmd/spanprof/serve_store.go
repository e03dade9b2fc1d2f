package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"

	"github.com/spanprof/spanprof/internal/web"
)

// serveStore runs `serve --store clickhouse://…`: what --otlp-listen
// receives goes to ClickHouse and the pages read from it.
func (l *serveLive) serveStore(ctx context.Context, addr string, files []string, stdout io.Writer, log *slog.Logger) error {
	if l.listen != "" && !l.allowRemote {
		if err := web.CheckLoopback(l.listen); err != nil {
			return err
		}
	}
	// The buffer, the exports being decoded and the pages' reads: a soft
	// heap limit keeps the collector from letting the heap double over
	// the buffer. GOMEMLIMIT wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(2*l.buffer + 256<<20)
	}
	return web.ServeStore(ctx, web.StoreOptions{URL: l.store, OTLPListen: l.listen, Listen: addr, Files: files,
		RetentionDays: l.retention, MaxBuffer: l.buffer, ListAge: l.limits.MaxAge, MaxSamples: l.limits.MaxSamples, Log: log,
		Ready: func(otlp, ui net.Addr, store string) {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
					log.Warn("serving beyond loopback: anyone who reaches this address can read the profiles", "listen", addr)
				}
			}
			if otlp != nil {
				fmt.Fprintf(stdout, "spanprof: receiving OTLP on %s into %s, serving it on %s (traces under /trace/; Ctrl-C to stop)\n",
					otlp, store, serveURLs(ui))
			} else {
				fmt.Fprintf(stdout, "spanprof: serving %s on %s (traces under /trace/; Ctrl-C to stop)\n", store, serveURLs(ui))
			}
		}})
}
