package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/spanprof/spanprof/internal/web"
	"github.com/spanprof/spanprof/internal/web/live"
)

// serveLive holds the flags of `serve --otlp-listen`: a receiver of OTLP
// profiles and traces feeding a bounded window the UI shows.
type serveLive struct {
	listen      string
	allowRemote bool
	limits      live.Limits
}

func liveFlags(fs *flag.FlagSet) *serveLive {
	l := &serveLive{}
	fs.StringVar(&l.listen, "otlp-listen", "", "receive OTLP/gRPC profiles and traces on this address (e.g. 127.0.0.1:4317) and serve them live")
	fs.BoolVar(&l.allowRemote, "otlp-allow-remote", false, "allow --otlp-listen beyond loopback (the receiver has no authentication)")
	fs.IntVar(&l.limits.MaxSamples, "window-samples", live.DefaultLimits.MaxSamples, "most profile samples the live window keeps (oldest evicted first, counted)")
	fs.IntVar(&l.limits.MaxSpans, "window-spans", live.DefaultLimits.MaxSpans, "most exported spans the live window keeps")
	fs.DurationVar(&l.limits.MaxAge, "window-age", live.DefaultLimits.MaxAge, "how long the live window keeps what it received")
	return l
}

// serve runs the OTLP receiver and the UI over one window; files given
// too are offered beside it in the file picker.
func (l *serveLive) serve(ctx context.Context, addr string, files []string, stdout io.Writer, log *slog.Logger) error {
	if !l.allowRemote {
		if err := live.CheckLoopback(l.listen); err != nil {
			return err
		}
	}
	if l.limits.MaxSamples <= 0 || l.limits.MaxSpans <= 0 || l.limits.MaxAge <= 0 {
		return errors.New("window limits must be positive: --window-samples, --window-spans, --window-age")
	}
	store := live.NewStore(l.limits)
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
	otlpLn, err := net.Listen("tcp", l.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w; stop the other receiver or pick another --otlp-listen", l.listen, err)
	}
	ln, err := web.Listen(addr)
	if err != nil {
		otlpLn.Close()
		return err
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			log.Warn("serving beyond loopback: anyone who reaches this address can read the profiles", "listen", addr)
		}
	}
	fmt.Fprintf(stdout, "spanprof: receiving OTLP on %s, serving the live window on %s (traces under /trace/; Ctrl-C to stop)\n",
		otlpLn.Addr(), serveURLs(ln.Addr()))
	rcv := live.NewReceiver(store, log)
	errc := make(chan error, 2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { errc <- rcv.Serve(ctx, otlpLn) }()
	go func() { errc <- web.Serve(ctx, ln, http.Handler(live.NewHandler(store, h, log))) }()
	err = <-errc
	cancel()
	return errors.Join(err, <-errc)
}
