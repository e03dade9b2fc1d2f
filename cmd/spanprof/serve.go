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
	"strconv"

	"github.com/spanprof/spanprof/internal/cli"
	"github.com/spanprof/spanprof/internal/web"
)

// runServe implements `spanprof serve [--listen ADDR] FILE...`: it loads
// every file first, so a bad one fails before anything listens.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spanprof serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:7070", "address to serve the UI on (loopback by default: the UI has no authentication)")
	verbose := fs.Bool("v", false, "verbose logs on stderr")
	lf := liveFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: spanprof serve [--listen 127.0.0.1:7070] [--otlp-listen 127.0.0.1:4317] [--store clickhouse://HOST:8123/DB] [FILE...]\n\nFILE is a .otlp.json, .otlp.pb or .pb.gz profile (spanprof record --output).")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "spanprof serve: %v\n", err)
		return 1
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	run := serve
	if lf.listen != "" || lf.store != "" {
		run = lf.serve
	}
	if err := run(ctx, *listen, fs.Args(), stdout, log); err != nil {
		fmt.Fprintf(stderr, "spanprof serve: %v\n", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, addr string, files []string, stdout io.Writer, log *slog.Logger) error {
	if len(files) == 0 {
		return errors.New("no profile files given: spanprof serve FILE... (.otlp.json, .otlp.pb, .pb.gz)")
	}
	sources := make([]web.Source, 0, len(files))
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
	ln, err := web.Listen(addr)
	if err != nil {
		return err
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			log.Warn("serving beyond loopback: anyone who reaches this address can read the profiles", "listen", addr)
		}
	}
	n := len(files)
	fmt.Fprintf(stdout, "spanprof: serving %d %s on %s (Ctrl-C to stop)\n", n, plural(n, "profile", "profiles"), serveURLs(ln.Addr()))
	return web.Serve(ctx, ln, h)
}

// serveURLs names URLs a browser can open. A wildcard listen address
// (0.0.0.0, ::) is no address to browse to: name the loopback one for this
// machine (Go's wildcard listeners take IPv4 as well) and the host's name
// for the others.
func serveURLs(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return "http://" + addr.String() + "/"
	}
	port := strconv.Itoa(tcp.Port)
	local := "http://" + net.JoinHostPort("127.0.0.1", port) + "/"
	host, err := os.Hostname()
	if err != nil || host == "" {
		return local
	}
	return local + " and http://" + net.JoinHostPort(host, port) + "/"
}
