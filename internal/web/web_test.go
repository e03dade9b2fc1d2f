package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/export"
	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/export/flamegraph"
	"github.com/spanprof/spanprof/internal/profile"
)

// totals sums event values by kind, span, thread and leaf function, the
// things the viewer filters on, so readers with and without per-event
// times compare equal.
func totals(p *profile.Profile) map[string]int64 {
	out := map[string]int64{}
	for _, s := range p.Samples {
		leaf := ""
		if len(s.Frames) > 0 {
			leaf = s.Frames[0].DisplayName()
		}
		k := fmt.Sprintf("%v %d/%d %s %s %s %s/%s", s.Kind, s.PID, s.TID, s.ThreadName, s.Link.SpanIDHex(), leaf, s.State, s.Reason)
		out[k] += s.Value
	}
	return out
}

func writeFixtures(t *testing.T) (dir string, want *profile.Profile) {
	t.Helper()
	dir = t.TempDir()
	want = exporttest.Small()
	for _, name := range []string{"p.otlp.json", "p.otlp.pb", "p.pb.gz"} {
		if err := export.WriteFile(filepath.Join(dir, name), want); err != nil {
			t.Fatal(err)
		}
	}
	return dir, want
}

func TestLoadFile(t *testing.T) {
	dir, want := writeFixtures(t)
	if err := os.WriteFile(filepath.Join(dir, "bad.pb.gz"), []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.otlp.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file    string
		wantErr string
		timed   bool
	}{
		{"p.otlp.json", "", true},
		{"p.otlp.pb", "", true},
		{"p.pb.gz", "", false},
		{"bad.pb.gz", "decode pprof", false},
		{"bad.otlp.json", "decode otlp json", false},
		{"missing.otlp.pb", "no such file", false},
		{"p.folded", "unsupported profile file", false},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := LoadFile(filepath.Join(dir, tt.file))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err = %v, want one line containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g, w := totals(got), totals(want); !mapsEqual(g, w) {
				t.Errorf("totals differ:\n got %v\nwant %v", g, w)
			}
			if timed := !got.Samples[0].Time.IsZero(); timed != tt.timed {
				t.Errorf("events timed = %v, want %v", timed, tt.timed)
			}
			if got.Frequency != want.Frequency || got.ProcessName(100) != "server" {
				t.Errorf("frequency %d, process 100 %q", got.Frequency, got.ProcessName(100))
			}
		})
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestErrorsUnsupported(t *testing.T) {
	_, err := LoadFile("x.txt")
	if !errors.Is(err, ErrUnsupportedFile) {
		t.Errorf("err = %v, want ErrUnsupportedFile", err)
	}
}

func newTestServer(t *testing.T, sources ...Source) *httptest.Server {
	t.Helper()
	h, err := NewHandler(slog.New(slog.NewTextHandler(io.Discard, nil)), sources...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func static(name string, p *profile.Profile) Source {
	return Source{Name: name, Profile: func() (*profile.Profile, error) { return p, nil }}
}

func TestHandler(t *testing.T) {
	small := exporttest.Small()
	calls := 0
	failing := Source{Name: "broken", Profile: func() (*profile.Profile, error) { calls++; return nil, errors.New("agent gone") }}
	srv := newTestServer(t, static("a.otlp.json", small), static("b.pb.gz", exporttest.Synthetic(50)), failing)
	tests := []struct {
		name     string
		path     string
		status   int
		ctype    string
		contains string
	}{
		{"healthz", "/healthz", 200, "text/plain", "ok"},
		{"default page", "/", 200, "text/html", `"current":"a.otlp.json"`},
		{"picked page", "/?file=b.pb.gz", 200, "text/html", `"files":["a.otlp.json","b.pb.gz","broken"],"current":"b.pb.gz"`},
		{"page keeps filters", "/?file=a.otlp.json&span_id=22", 200, "text/html", "spanprof-data"},
		{"data", "/profile.json?file=a.otlp.json", 200, "application/json", `"version":1`},
		{"unknown file", "/?file=nope", 404, "text/plain", `no profile named "nope"`},
		{"failing source", "/?file=broken", 500, "text/plain", "load profile: agent gone"},
		{"unknown path", "/x", 404, "text/plain", "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), tt.ctype) {
				t.Fatalf("status %d %q, want %d %q", resp.StatusCode, resp.Header.Get("Content-Type"), tt.status, tt.ctype)
			}
			if !bytes.Contains(body, []byte(tt.contains)) {
				t.Errorf("body lacks %q: %.300s", tt.contains, body)
			}
			if tt.ctype == "text/html" && resp.Header.Get("Content-Security-Policy") != flamegraph.ContentSecurityPolicy {
				t.Errorf("page served without its content security policy")
			}
		})
	}
	if calls != 1 {
		t.Errorf("failing source called %d times, want 1", calls)
	}
}

func TestHandlerReusesEncoding(t *testing.T) {
	p := exporttest.Small()
	live := p
	srv := newTestServer(t, Source{Name: "live", Profile: func() (*profile.Profile, error) { return live, nil }})
	get := func() flamegraph.Data {
		resp, err := http.Get(srv.URL + "/profile.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d flamegraph.Data
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if n := len(get().Samples.Kind); n != 10 {
		t.Fatalf("%d samples, want 10", n)
	}
	// A live source hands out a new profile: the page must follow it.
	live = exporttest.Synthetic(30)
	if n := len(get().Samples.Kind); n != 30 {
		t.Errorf("%d samples after the source changed, want 30", n)
	}
}

func TestNewHandlerErrors(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := NewHandler(log); err == nil {
		t.Error("no error without sources")
	}
	p := exporttest.Small()
	if _, err := NewHandler(log, static("a", p), static("a", p)); err == nil || !strings.Contains(err.Error(), `two sources named "a"`) {
		t.Errorf("err = %v, want duplicate name error", err)
	}
}

func TestListenBusy(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Listen(ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "address already in use; stop the other server or pick another --listen") {
		t.Errorf("err = %v", err)
	}
	if slices.Contains([]byte(err.Error()), '\n') {
		t.Errorf("multi-line error: %q", err)
	}
}
