package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"

	"github.com/spanprof/spanprof/internal/web"
	"github.com/spanprof/spanprof/internal/web/live"
	"github.com/spanprof/spanprof/internal/web/live/chstore"
)

// serveStore runs `serve --store clickhouse://…`: the receiver (when
// --otlp-listen is given) writes into ClickHouse and the pages read from
// it, so several instances can share one store and any of them answers
// for a trace whatever instance its data came through.
func (l *serveLive) serveStore(ctx context.Context, addr string, files []string, stdout io.Writer, log *slog.Logger) error {
	target, err := chstore.ParseURL(l.store)
	if err != nil {
		return err
	}
	if l.retention < 0 {
		return errors.New("--store-retention-days must be 0 (keep everything) or more")
	}
	if l.listen != "" && !l.allowRemote {
		if err := live.CheckLoopback(l.listen); err != nil {
			return err
		}
	}
	// The buffer, the exports being decoded and the pages' reads: a soft
	// heap limit keeps the collector from letting the heap double over
	// the buffer. GOMEMLIMIT wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(2*l.buffer + 256<<20)
	}
	opts := chstore.Options{MaxBuffer: int(l.buffer), RetentionDays: l.retention, ListAge: l.limits.MaxAge, MaxSamples: l.limits.MaxSamples}
	store := chstore.New(chstore.NewHTTPConn(target, 0), target, opts, log)
	// Creating the schema now makes a wrong address or database fail
	// visibly at start; a server that is down is retried in the
	// background (its status shows on the pages).
	if err := store.EnsureSchema(ctx); err != nil {
		if errors.Is(err, chstore.ErrServer) {
			return err
		}
		log.Warn("clickhouse not reachable yet; buffering exports and retrying", "store", target.String(), "err", err)
	}
	sources := []web.Source{{Name: "live", Profile: store.Profile}}
	for _, f := range files {
		src, err := web.FileSource(f)
		if err != nil {
			return err
		}
		sources = append(sources, src)
	}
	h, err := web.NewHandler(log, sources...)
	if err != nil {
		return err
	}
	h.Live = true
	var otlpLn net.Listener
	if l.listen != "" {
		if otlpLn, err = net.Listen("tcp", l.listen); err != nil {
			return fmt.Errorf("listen on %s: %w; stop the other receiver or pick another --otlp-listen", l.listen, err)
		}
	}
	ln, err := web.Listen(addr)
	if err != nil {
		if otlpLn != nil {
			otlpLn.Close()
		}
		return err
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			log.Warn("serving beyond loopback: anyone who reaches this address can read the profiles", "listen", addr)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	n := 1
	if otlpLn != nil {
		fmt.Fprintf(stdout, "spanprof: receiving OTLP on %s into %s, serving it on %s (traces under /trace/; Ctrl-C to stop)\n",
			otlpLn.Addr(), target, serveURLs(ln.Addr()))
		rcv := live.NewReceiver(store, log)
		go func() { errc <- rcv.Serve(ctx, otlpLn) }()
		n++
	} else {
		fmt.Fprintf(stdout, "spanprof: serving %s on %s (traces under /trace/; Ctrl-C to stop)\n", target, serveURLs(ln.Addr()))
	}
	writer := make(chan struct{})
	go func() { store.Run(ctx); close(writer) }()
	go func() { errc <- web.Serve(ctx, ln, http.Handler(live.NewHandler(store, h, log))) }()
	err = <-errc
	cancel()
	for range n - 1 {
		err = errors.Join(err, <-errc)
	}
	<-writer
	return err
}
