package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spanprof/spanprof/internal/web"
)

// serveLive holds the flags of `serve --otlp-listen`: a receiver of OTLP
// profiles and traces feeding a bounded window the UI shows.
type serveLive struct {
	listen      string
	allowRemote bool
	limits      web.LiveLimits
	// store is --store: a database instead of the in-memory window.
	store     string
	retention int
	buffer    int64
}

func liveFlags(fs *flag.FlagSet) *serveLive {
	l := &serveLive{}
	fs.StringVar(&l.listen, "otlp-listen", "", "receive OTLP/gRPC profiles and traces on this address (e.g. 127.0.0.1:4317) and serve them live")
	fs.BoolVar(&l.allowRemote, "otlp-allow-remote", false, "allow --otlp-listen beyond loopback (the receiver has no authentication)")
	fs.IntVar(&l.limits.MaxSamples, "window-samples", web.DefaultLiveLimits.MaxSamples, "most profile samples the live window keeps (oldest evicted first, counted)")
	l.limits.MaxBytes = web.DefaultLiveLimits.MaxBytes
	fs.Func("window-bytes", fmt.Sprintf("heap the live window's samples may hold, e.g. 512MiB (default %s; oldest evicted first, counted)", formatBytes(web.DefaultLiveLimits.MaxBytes)), func(v string) error {
		n, err := parseBytes(v)
		l.limits.MaxBytes = n
		return err
	})
	fs.IntVar(&l.limits.MaxSpans, "window-spans", web.DefaultLiveLimits.MaxSpans, "most exported spans the live window keeps")
	fs.DurationVar(&l.limits.MaxAge, "window-age", web.DefaultLiveLimits.MaxAge, "how long the live window keeps what it received (with --store: how far back the trace list looks)")
	fs.StringVar(&l.store, "store", "", "keep what --otlp-listen receives in ClickHouse, clickhouse://HOST:8123/DATABASE (its HTTP interface), instead of the in-memory window; without --otlp-listen, only answer from it")
	fs.IntVar(&l.retention, "store-retention-days", 7, "with --store: days of data kept (day partitions older are dropped); 0 keeps everything")
	l.buffer = 64 << 20
	fs.Func("store-buffer", "with --store: exports kept in memory while ClickHouse is down or slow, e.g. 64MiB (default 64MiB; past it the oldest are dropped, counted)", func(v string) error {
		n, err := parseBytes(v)
		l.buffer = n
		return err
	})
	return l
}

// serve runs the OTLP receiver and the UI over one window; files given
// too are offered beside it in the file picker.
func (l *serveLive) serve(ctx context.Context, addr string, files []string, stdout io.Writer, log *slog.Logger) error {
	if l.store != "" {
		return l.serveStore(ctx, addr, files, stdout, log)
	}
	if !l.allowRemote {
		if err := web.CheckLoopback(l.listen); err != nil {
			return err
		}
	}
	if l.limits.MaxSamples <= 0 || l.limits.MaxBytes <= 0 || l.limits.MaxSpans <= 0 || l.limits.MaxAge <= 0 {
		return errors.New("window limits must be positive: --window-samples, --window-bytes, --window-spans, --window-age")
	}
	// The Go heap grows to twice the live heap between collections; a
	// soft limit a little above the window's budget makes the collector
	// work harder instead, so RSS follows --window-bytes. GOMEMLIMIT wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit(l.limits.MaxBytes))
	}
	return web.ServeLive(ctx, web.LiveOptions{OTLPListen: l.listen, Listen: addr, Files: files, Limits: l.limits, Log: log,
		Ready: func(otlp, ui net.Addr) {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
					log.Warn("serving beyond loopback: anyone who reaches this address can read the profiles", "listen", addr)
				}
			}
			fmt.Fprintf(stdout, "spanprof: receiving OTLP on %s, serving the live window on %s (traces under /trace/; Ctrl-C to stop)\n",
				otlp, serveURLs(ui))
		}})
}

// memoryLimit is the soft heap limit for a window of maxBytes: the window,
// half as much again for the merged profile the flame graph page reads and
// the requests being decoded, and room for the spans and the runtime.
func memoryLimit(maxBytes int64) int64 {
	return maxBytes + maxBytes/2 + 128<<20
}

var byteUnits = []struct {
	suffix string
	n      int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// parseBytes reads a size: a number of bytes, or one with a KiB, MiB or
// GiB suffix.
func parseBytes(v string) (int64, error) {
	mult := int64(1)
	num := v
	for _, u := range byteUnits {
		if s, ok := strings.CutSuffix(v, u.suffix); ok {
			num, mult = s, u.n
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("parse size %q: want a positive number of bytes, e.g. 256MiB", v)
	}
	return n * mult, nil
}

func formatBytes(n int64) string {
	for _, u := range byteUnits {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d%s", n/u.n, u.suffix)
		}
	}
	return strconv.FormatInt(n, 10)
}
