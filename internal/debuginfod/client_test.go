package debuginfod

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/debuginfod/debuginfodtest"
	"github.com/spanprof/spanprof/internal/testutil"
)

var fixtures = filepath.Join("..", "..", "testdata", "symbolize", "build")

func TestMain(m *testing.M) {
	testutil.MustBuildFixtures("symbolize")
	os.Exit(m.Run())
}

func buildID(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("readelf", "-n", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if _, id, ok := strings.Cut(l, "Build ID: "); ok {
			return strings.TrimSpace(id)
		}
	}
	t.Fatalf("%s has no build ID", path)
	return ""
}

// serveFile answers /buildid/<want>/debuginfo with the file, 404 otherwise,
// and counts requests.
func serveFile(want, path string, hits *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/buildid/"+want+"/debuginfo" {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, path)
	})
}

func TestClientServers(t *testing.T) {
	debug := filepath.Join(fixtures, "chain-gcc.debug")
	id := buildID(t, debug)
	var goodHits, garbageHits, hangHits, missHits atomic.Int64
	good := httptest.NewServer(serveFile(id, debug, &goodHits))
	defer good.Close()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		garbageHits.Add(1)
		w.Write([]byte("<html>this is a login page, not an ELF file</html>"))
	}))
	defer garbage.Close()
	// hang holds every request until the client gives up.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hangHits.Add(1)
		<-r.Context().Done()
	}))
	defer hang.Close()
	missing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		missHits.Add(1)
		http.NotFound(w, r)
	}))
	defer missing.Close()
	wrongFile := httptest.NewServer(serveFile(id, filepath.Join(fixtures, "inline-gcc.debug"), new(atomic.Int64)))
	defer wrongFile.Close()

	tests := []struct {
		name    string
		urls    []string
		wantOK  bool
		want    Stats
		mayHang bool
	}{
		{"one good server", []string{good.URL}, true, Stats{Requested: 1, Fetched: 1}, false},
		{"missing then good, in order", []string{missing.URL, good.URL}, true, Stats{Requested: 1, Fetched: 1}, false},
		{"garbage body", []string{garbage.URL}, false, Stats{Requested: 1, Invalid: 1}, false},
		{"other build's file", []string{wrongFile.URL}, false, Stats{Requested: 1, Invalid: 1}, false},
		{"hanging server", []string{hang.URL}, false, Stats{Requested: 1, Timeouts: 1}, true},
		{"hanging then good", []string{hang.URL, good.URL}, true, Stats{Requested: 1, Fetched: 1, Timeouts: 1}, true},
		{"not found anywhere", []string{missing.URL, missing.URL}, false, Stats{Requested: 1, NotFound: 1}, false},
		{"connection refused", []string{"http://127.0.0.1:1"}, false, Stats{Requested: 1, HTTPError: 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Options{URLs: tt.urls, CacheDir: t.TempDir(), Timeout: 300 * time.Millisecond,
				Verify: verifyBuildID})
			if err != nil {
				t.Fatal(err)
			}
			c.Request(id)
			c.Request(id) // deduplicated while pending
			c.Wait(context.Background(), nil)
			path, ok := c.Cached(id)
			if ok != tt.wantOK {
				t.Fatalf("Cached = %q, %v; want ok=%v (stats %+v)", path, ok, tt.wantOK, c.Stats())
			}
			got := c.Stats()
			got.CacheHits = 0
			if got != tt.want {
				t.Errorf("Stats = %+v, want %+v", got, tt.want)
			}
			if ok {
				if err := verifyBuildID(path, id); err != nil {
					t.Errorf("cached file: %v", err)
				}
				return
			}
			// A failure is not retried within the negative TTL.
			c.Request(id)
			if n := c.Stats(); n.Negative != 1 || n.Requested != 1 {
				t.Errorf("after a failure, Request gave %+v; want it skipped by the negative cache", n)
			}
			entries, _ := os.ReadDir(c.opts.CacheDir)
			if len(entries) != 0 {
				t.Errorf("failed fetch left %d entries in the cache", len(entries))
			}
		})
	}
}

// verifyBuildID stands in for symbolize.VerifyDebugFile, which this
// package must not import: readelf says whose file it is.
func verifyBuildID(path, want string) error {
	if err := verifyELF(path, want); err != nil {
		return err
	}
	out, err := exec.Command("readelf", "-n", path).Output()
	if err != nil {
		return err
	}
	if !strings.Contains(string(out), "Build ID: "+want) {
		return os.ErrInvalid
	}
	return nil
}

func TestNegativeTTLExpires(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	}))
	defer srv.Close()
	c, err := New(Options{URLs: []string{srv.URL}, CacheDir: t.TempDir(), NegativeTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	id := strings.Repeat("ab", 20)
	for range 3 {
		c.Request(id)
		c.Wait(context.Background(), nil)
	}
	if hits.Load() != 3 {
		t.Errorf("server asked %d times, want 3 once the negative entries expired", hits.Load())
	}
}

func TestCacheBound(t *testing.T) {
	debug := filepath.Join(fixtures, "chain-gcc.debug")
	other := filepath.Join(fixtures, "inline-gcc.debug")
	ids := []string{buildID(t, debug), buildID(t, other)}
	mux := http.NewServeMux()
	var hits atomic.Int64
	mux.Handle("/buildid/"+ids[0]+"/debuginfo", serveFile(ids[0], debug, &hits))
	mux.Handle("/buildid/"+ids[1]+"/debuginfo", serveFile(ids[1], other, &hits))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	fi, _ := os.Stat(debug)
	fo, _ := os.Stat(other)
	bound := max(fi.Size(), fo.Size()) + 1 // room for one of the two
	dir := t.TempDir()
	c, err := New(Options{URLs: []string{srv.URL}, CacheDir: dir, MaxCacheBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := c.Fetch(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := c.Cached(ids[0]); ok {
		t.Error("least recently used file survived the size bound")
	}
	if _, ok := c.Cached(ids[1]); !ok {
		t.Error("newest file evicted")
	}
	if st := c.Stats(); st.Evicted != 1 || c.cache.bytes() > bound {
		t.Errorf("evicted %d, cache %d bytes, bound %d", st.Evicted, c.cache.bytes(), bound)
	}
	// A new client finds what the old one left on disk.
	c2, err := New(Options{URLs: []string{srv.URL}, CacheDir: dir, MaxCacheBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c2.Cached(ids[1]); !ok {
		t.Error("cache not reloaded from disk")
	}
}

func TestBoundedConcurrency(t *testing.T) {
	var inFlight, peak atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inFlight.Add(-1)
		http.NotFound(w, r)
	}))
	defer srv.Close()
	c, err := New(Options{URLs: []string{srv.URL}, CacheDir: t.TempDir(), MaxConcurrent: 2, MaxPending: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		c.Request(strings.Repeat(string("0123456789abcdef"[i]), 40))
	}
	if st := c.Stats(); st.Requested != 5 || st.Dropped != 3 {
		t.Errorf("queued %d, dropped %d; want 5 and 3", st.Requested, st.Dropped)
	}
	close(release)
	c.Wait(context.Background(), nil)
	if peak.Load() > 2 {
		t.Errorf("%d requests in flight, bound 2", peak.Load())
	}
}

func TestURLsFromEnv(t *testing.T) {
	t.Setenv("DEBUGINFOD_URLS", "  https://a.example/  http://b.example ")
	if got := URLsFromEnv(); len(got) != 2 || got[0] != "https://a.example/" || got[1] != "http://b.example" {
		t.Errorf("URLsFromEnv = %q", got)
	}
	t.Setenv("XDG_CACHE_HOME", "/x")
	if got := DefaultCacheDir(); got != "/x/spanprof/debuginfod" {
		t.Errorf("DefaultCacheDir = %q", got)
	}
}

// TestRealServer fetches from elfutils' debuginfod serving a directory
// that holds only the separate debug file.
func TestRealServer(t *testing.T) {
	debug := filepath.Join(fixtures, "chain-gcc.debug")
	id := buildID(t, debug)
	dir := t.TempDir()
	data, _ := os.ReadFile(debug)
	os.WriteFile(filepath.Join(dir, "chain-gcc.debug"), data, 0o644)
	srv := debuginfodtest.Start(t, dir, id)
	c, err := New(Options{URLs: []string{srv.URL}, CacheDir: t.TempDir(), HTTPClient: srv.HTTPClient, Verify: verifyBuildID})
	if err != nil {
		t.Fatal(err)
	}
	path, err := c.Fetch(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != string(data) {
		t.Error("fetched file differs from the served one")
	}
	if _, err := c.Fetch(context.Background(), strings.Repeat("0", 40)); err == nil {
		t.Error("fetch of an unknown build ID succeeded")
	}
	if st := c.Stats(); st.Fetched != 1 || st.NotFound != 1 {
		t.Errorf("Stats = %+v", st)
	}
}
