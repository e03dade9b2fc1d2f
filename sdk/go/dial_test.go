package spanprof

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"strings"
	"testing"
)

// labelsOf returns the labels of the goroutines whose stacks contain fn,
// as the runtime's goroutine profile reports them.
func labelsOf(t *testing.T, fn string) []map[string]string {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatalf("write goroutine profile: %v", err)
	}
	var out []map[string]string
	labels := ""
	counted := false
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" || strings.Contains(line, " @ "):
			labels, counted = "", false
		case strings.HasPrefix(line, "# labels: "):
			labels = strings.TrimPrefix(line, "# labels: ")
		case strings.Contains(line, fn) && !counted:
			counted = true
			got := map[string]string{}
			if labels != "" {
				if err := json.Unmarshal([]byte(labels), &got); err != nil {
					t.Fatalf("parse labels %q: %v", labels, err)
				}
			}
			out = append(out, got)
		}
	}
	return out
}

// TestDetachDial makes a request inside a span over a kept-alive
// connection and reads, after the span ended, the labels of the
// connection's reader goroutine from the runtime: with a plain transport
// it carries the ended span (the leak DetachDial exists for), with
// DetachDial it carries none, while the request's goroutine had the span
// throughout.
func TestDetachDial(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	tr := newProvider(t).Tracer("test")
	for _, tc := range []struct {
		name   string
		detach bool
	}{{"plain transport leaks", false}, {"DetachDial", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dial := (&net.Dialer{}).DialContext
			if tc.detach {
				dial = DetachDial(dial)
			}
			transport := &http.Transport{DialContext: dial}
			defer transport.CloseIdleConnections()
			var spanID string
			runOnFreshGoroutine(func() {
				ctx, s := tr.Start(context.Background(), "call")
				spanID = s.SpanContext().SpanID().String()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := (&http.Client{Transport: transport}).Do(req)
				if err != nil {
					t.Errorf("get: %v", err)
				} else {
					_, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				if got := goroutineLabels(t)[LabelSpanID]; got != spanID {
					t.Errorf("request goroutine's span %q, want %q", got, spanID)
				}
				s.End()
			})
			readers := labelsOf(t, "net/http.(*persistConn).readLoop")
			if len(readers) == 0 {
				t.Fatal("no connection reader goroutine: the connection was not kept alive")
			}
			leaked := 0
			for _, l := range readers {
				if l[LabelSpanID] == spanID {
					leaked++
				}
			}
			if want := map[bool]int{false: len(readers), true: 0}[tc.detach]; leaked != want {
				t.Errorf("%d of %d connection readers carry the ended span, want %d", leaked, len(readers), want)
			}
		})
	}
}
