// Package web serves the flame graph and span timeline viewer
// (internal/export/flamegraph) over HTTP for profile files, with a file
// picker when there are several. A source is a function returning a
// profile, so a live agent can be plugged in beside files.
package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spanprof/spanprof/internal/export/flamegraph"
	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/profile"
)

// ErrUnsupportedFile is returned for a file whose name selects no reader.
var ErrUnsupportedFile = errors.New("unsupported profile file")

// Source is one profile the server offers.
type Source struct {
	// Name identifies the source in the file picker and in ?file=NAME.
	Name string
	// Profile returns the profile to show; it is called on every page
	// load. Returning the same pointer as before lets the server reuse
	// the encoded data, so static sources cost nothing after the first.
	Profile func() (*profile.Profile, error)
}

// LoadFile reads a profile file; its name selects the reader: .otlp.json,
// .otlp.pb or .pb.gz. Errors are one line naming the file.
func LoadFile(path string) (*profile.Profile, error) {
	name := strings.ToLower(filepath.Base(path))
	var read func(*os.File) (*profile.Profile, error)
	switch {
	case strings.HasSuffix(name, ".otlp.json"):
		read = func(f *os.File) (*profile.Profile, error) { return otlp.ReadJSON(f) }
	case strings.HasSuffix(name, ".otlp.pb"):
		read = func(f *os.File) (*profile.Profile, error) { return otlp.ReadProto(f) }
	case strings.HasSuffix(name, ".pb.gz"), strings.HasSuffix(name, ".pprof"):
		read = func(f *os.File) (*profile.Profile, error) { return ReadPprof(f) }
	default:
		return nil, fmt.Errorf("open %s: %w: name it *.otlp.json, *.otlp.pb or *.pb.gz", path, ErrUnsupportedFile)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open profile: %w", err)
	}
	defer f.Close()
	p, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return p, nil
}

// FileSource loads path now, so a bad file fails before the server
// starts, and serves that profile.
func FileSource(path string) (Source, error) {
	p, err := LoadFile(path)
	if err != nil {
		return Source{}, err
	}
	return Source{Name: path, Profile: func() (*profile.Profile, error) { return p, nil }}, nil
}

// Handler serves the viewer: GET / (the page for ?file=NAME, the first
// source by default), GET /profile.json?file=NAME (the viewer data) and
// GET /healthz.
type Handler struct {
	// Live makes the pages those of a live window (flamegraph.Page.Live).
	Live    bool
	log     *slog.Logger
	sources []Source
	names   []string
	mu      sync.Mutex
	cache   map[string]encoded
}

type encoded struct {
	p    *profile.Profile
	data []byte
}

// NewHandler returns a handler for sources, which must be at least one
// and have distinct names.
func NewHandler(log *slog.Logger, sources ...Source) (*Handler, error) {
	if len(sources) == 0 {
		return nil, errors.New("create handler: no profile sources")
	}
	h := &Handler{log: log, sources: sources, cache: map[string]encoded{}}
	seen := map[string]bool{}
	for _, s := range sources {
		if seen[s.Name] {
			return nil, fmt.Errorf("create handler: two sources named %q", s.Name)
		}
		seen[s.Name] = true
		h.names = append(h.names, s.Name)
	}
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case "/healthz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	case "/", "/index.html":
		h.page(w, r, false)
	case "/profile.json":
		h.page(w, r, true)
	default:
		http.NotFound(w, r)
	}
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request, jsonOnly bool) {
	name := r.URL.Query().Get("file")
	src := h.sources[0]
	if name != "" {
		i := -1
		for j := range h.sources {
			if h.sources[j].Name == name {
				i = j
			}
		}
		if i < 0 {
			http.Error(w, fmt.Sprintf("no profile named %q", name), http.StatusNotFound)
			return
		}
		src = h.sources[i]
	}
	start := time.Now()
	data, err := h.data(src)
	if err != nil {
		h.log.Error("load profile", "source", src.Name, "err", err)
		http.Error(w, "load profile: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if jsonOnly {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
		return
	}
	var buf bytes.Buffer
	title := "spanprof · " + filepath.Base(src.Name)
	if err := flamegraph.WritePage(&buf, data, flamegraph.Page{Title: title, Files: h.names, Current: src.Name, Live: h.Live}); err != nil {
		h.log.Error("render page", "source", src.Name, "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The page needs nothing from the network; the policy keeps it so.
	w.Header().Set("Content-Security-Policy", flamegraph.Page{Live: h.Live}.Policy())
	_, _ = w.Write(buf.Bytes())
	h.log.Debug("served page", "source", src.Name, "bytes", buf.Len(), "took", time.Since(start))
}

// data returns the encoded viewer data of src, reusing the last encoding
// while the source returns the same profile.
func (h *Handler) data(src Source) ([]byte, error) {
	p, err := src.Profile()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	c, ok := h.cache[src.Name]
	h.mu.Unlock()
	if ok && c.p == p {
		return c.data, nil
	}
	data, err := flamegraph.NewData(p).Encode()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.cache[src.Name] = encoded{p, data}
	h.mu.Unlock()
	return data, nil
}

// Listen opens addr, turning the usual failures into one-line errors
// that say what to do.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("listen on %s: address already in use; stop the other server or pick another --listen", addr)
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("listen on %s: permission denied; use a port above 1023", addr)
	case err != nil:
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// Serve serves h on ln until ctx ends, then shuts down gracefully.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shut down http server: %w", err)
	}
	return nil
}
