package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spanprof/spanprof/internal/web/live"
	"github.com/spanprof/spanprof/internal/web/live/chstore"
)

// StoreOptions say where `serve --store` reads and writes, and where it
// receives and serves.
type StoreOptions struct {
	// URL is --store, clickhouse://HOST:PORT/DATABASE.
	URL string
	// OTLPListen is the OTLP/gRPC receiver's address; empty runs an
	// instance that only answers from the store.
	OTLPListen, Listen string
	// Files are offered beside the store in the file picker.
	Files []string
	// RetentionDays of data are kept (0 keeps everything); MaxBuffer
	// bytes of exports wait in memory while the store is down or slow.
	RetentionDays int
	MaxBuffer     int64
	// ListAge is how far back the trace list looks; MaxSamples bounds
	// the samples one page reads.
	ListAge    time.Duration
	MaxSamples int
	Log        *slog.Logger
	// Ready is told the receiver's address (nil without one), the UI's
	// and the store's once they listen.
	Ready func(otlp, ui net.Addr, store string)
}

// ServeStore runs `serve --store clickhouse://…` until ctx ends: the
// receiver (when OTLPListen is given) writes into ClickHouse and the pages
// read from it, so several instances can share one store and any of them
// answers for a trace whatever instance its data came through.
func ServeStore(ctx context.Context, o StoreOptions) error {
	target, err := chstore.ParseURL(o.URL)
	if err != nil {
		return err
	}
	if o.RetentionDays < 0 {
		return errors.New("--store-retention-days must be 0 (keep everything) or more")
	}
	opts := chstore.Options{MaxBuffer: int(o.MaxBuffer), RetentionDays: o.RetentionDays, ListAge: o.ListAge, MaxSamples: o.MaxSamples}
	store := chstore.New(chstore.NewHTTPConn(target, 0), target, opts, o.Log)
	// Creating the schema now makes a wrong address or database fail
	// visibly at start; a server that is down is retried in the
	// background (its status shows on the pages).
	if err := store.EnsureSchema(ctx); err != nil {
		if errors.Is(err, chstore.ErrServer) {
			return err
		}
		o.Log.Warn("clickhouse not reachable yet; buffering exports and retrying", "store", target.String(), "err", err)
	}
	sources := []Source{{Name: "live", Profile: store.Profile}}
	for _, f := range o.Files {
		src, err := FileSource(f)
		if err != nil {
			return err
		}
		sources = append(sources, src)
	}
	h, err := NewHandler(o.Log, sources...)
	if err != nil {
		return err
	}
	h.Live = true
	var otlpLn net.Listener
	if o.OTLPListen != "" {
		if otlpLn, err = net.Listen("tcp", o.OTLPListen); err != nil {
			return fmt.Errorf("listen on %s: %w; stop the other receiver or pick another --otlp-listen", o.OTLPListen, err)
		}
	}
	ln, err := Listen(o.Listen)
	if err != nil {
		if otlpLn != nil {
			otlpLn.Close()
		}
		return err
	}
	var otlpAddr net.Addr
	if otlpLn != nil {
		otlpAddr = otlpLn.Addr()
	}
	if o.Ready != nil {
		o.Ready(otlpAddr, ln.Addr(), target.String())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	n := 1
	if otlpLn != nil {
		rcv := live.NewReceiver(store, o.Log)
		go func() { errc <- rcv.Serve(ctx, otlpLn) }()
		n++
	}
	writer := make(chan struct{})
	go func() { store.Run(ctx); close(writer) }()
	go func() { errc <- Serve(ctx, ln, http.Handler(live.NewHandler(store, h, o.Log))) }()
	err = <-errc
	cancel()
	for range n - 1 {
		err = errors.Join(err, <-errc)
	}
	<-writer
	return err
}
