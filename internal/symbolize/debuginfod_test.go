package symbolize

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/debuginfod"
	"github.com/spanprof/spanprof/internal/debuginfod/debuginfodtest"
)

// TestDebuginfod symbolizes a stripped binary from a real debuginfod
// server: the first Open only requests the file (never waiting for the
// network), an Open after the fetch ended parses again with it. A server
// sending garbage never yields names.
func TestDebuginfod(t *testing.T) {
	bin := fixture("chain-gcc-stripped")
	id := readelfBuildID(t, bin)
	truth := nmSymbols(t, fixture("chain-gcc"))
	serve := t.TempDir()
	copyFile(t, fixture("chain-gcc.debug"), filepath.Join(serve, "chain-gcc.debug"))
	srv := debuginfodtest.Start(t, serve, id)
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 4096))
	}))
	defer garbage.Close()

	tests := []struct {
		name      string
		url       string
		client    *http.Client
		wantNames bool
	}{
		{"real server", srv.URL, srv.HTTPClient, true},
		{"garbage server", garbage.URL, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dc, err := debuginfod.New(debuginfod.Options{URLs: []string{tt.url}, CacheDir: t.TempDir(),
				HTTPClient: tt.client, Timeout: 10 * time.Second, Verify: VerifyDebugFile})
			if err != nil {
				t.Fatal(err)
			}
			s := New(nil, Options{DebugDirs: []string{}, Fetcher: dc, Mode: ModeFull})
			obj, err := s.Open(bin, bin)
			if err != nil {
				t.Fatal(err)
			}
			if sym, ok := obj.Lookup(truth["leaf"]); ok {
				t.Fatalf("named %q before any debug file arrived", sym.Function)
			}
			if st := s.Stats(); st.DebuginfodRequests != 1 {
				t.Fatalf("Stats = %+v, want one debuginfod request", st)
			}
			dc.Wait(context.Background(), nil)
			obj, err = s.Open(bin, bin)
			if err != nil {
				t.Fatal(err)
			}
			for _, fn := range []string{"leaf", "a", "main"} {
				sym, ok := obj.Lookup(truth[fn] + 1)
				if tt.wantNames && (!ok || sym.Function != fn || sym.Line == 0) {
					t.Errorf("Lookup(%s+1) = %+v, %v", fn, sym, ok)
				}
				if !tt.wantNames && ok {
					t.Errorf("Lookup(%s+1) = %q from a garbage server", fn, sym.Function)
				}
			}
			st, dst := s.Stats(), dc.Stats()
			if tt.wantNames && (st.DebuginfodFiles != 1 || obj.DebugSource() != "debuginfod") {
				t.Errorf("Stats = %+v, source %q", st, obj.DebugSource())
			}
			if !tt.wantNames && dst.Invalid != 1 {
				t.Errorf("debuginfod Stats = %+v, want the garbage counted invalid", dst)
			}
			// Later opens are served from the cache: no new request.
			s.Open(bin, bin)
			if st2 := s.Stats(); st2.DebuginfodRequests > 2 {
				t.Errorf("requests kept coming: %+v", st2)
			}
		})
	}
}
