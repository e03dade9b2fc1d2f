package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/spanprof/spanprof/internal/web/live"
)

// LiveLimits bound the live window (live.Limits); DefaultLiveLimits are
// its defaults.
type LiveLimits = live.Limits

// DefaultLiveLimits are the live window's default bounds.
var DefaultLiveLimits = live.DefaultLimits

// CheckLoopback refuses an address beyond loopback for the OTLP receiver,
// which has no authentication.
func CheckLoopback(addr string) error { return live.CheckLoopback(addr) }

// LiveOptions say where `serve --otlp-listen` receives and serves.
type LiveOptions struct {
	// OTLPListen is the OTLP/gRPC receiver's address, Listen the UI's.
	OTLPListen, Listen string
	// Files are offered beside the live window in the file picker.
	Files  []string
	Limits LiveLimits
	Log    *slog.Logger
	// Ready is told the receiver's and the UI's addresses once both
	// listen.
	Ready func(otlp, ui net.Addr)
}

// ServeLive runs the OTLP receiver and the UI over one window until ctx
// ends.
func ServeLive(ctx context.Context, o LiveOptions) error {
	store := live.NewStore(o.Limits)
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
	otlpLn, err := net.Listen("tcp", o.OTLPListen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w; stop the other receiver or pick another --otlp-listen", o.OTLPListen, err)
	}
	ln, err := Listen(o.Listen)
	if err != nil {
		otlpLn.Close()
		return err
	}
	if o.Ready != nil {
		o.Ready(otlpLn.Addr(), ln.Addr())
	}
	rcv := live.NewReceiver(store, o.Log)
	errc := make(chan error, 2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { errc <- rcv.Serve(ctx, otlpLn) }()
	go func() { errc <- Serve(ctx, ln, http.Handler(live.NewHandler(store, h, o.Log))) }()
	err = <-errc
	cancel()
	return errors.Join(err, <-errc)
}
