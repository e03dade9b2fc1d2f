package browser

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/profile"
)

// demoProfile looks like a small service at 999 Hz: worker threads run
// requests one after another, each a span that parses, queries a database
// (blocked off-CPU) and renders, with idle gaps outside any span.
func demoProfile() *profile.Profile {
	r := rand.New(rand.NewPCG(3, 4))
	const tick = time.Millisecond
	p := &profile.Profile{Start: exporttest.T0, End: exporttest.T0.Add(2 * time.Second), Frequency: 1000,
		Processes: map[uint32]*profile.Process{
			4242: {PID: 4242, ExeName: "checkout", ServiceName: "checkout"},
			5151: {PID: 5151, ExeName: "inventory", ServiceName: "inventory"},
		}}
	bin := &profile.Mapping{Start: 0x400000, Limit: 0x900000, Path: "/srv/bin/app", BuildID: "ab12"}
	kernel := &profile.Mapping{Kernel: true}
	fr := func(names ...string) []profile.Frame { // root first in, leaf first out
		out := make([]profile.Frame, len(names))
		for i, n := range names {
			m := bin
			if n == "do_syscall_64" || n == "schedule" || n == "futex_wait_queue" || n == "tcp_recvmsg" {
				m = kernel
			}
			out[len(names)-1-i] = profile.Frame{Address: 0x400000 + uint64(i+1)*0x100 + uint64(len(n))<<12, Function: n, Mapping: m}
		}
		return out
	}
	base := []string{"main.main", "net/http.(*Server).Serve", "net/http.(*conn).serve", "app.(*Handler).ServeHTTP"}
	with := func(extra ...string) []profile.Frame { return fr(append(append([]string{}, base...), extra...)...) }
	phases := []struct {
		frames [][]profile.Frame
		off    []profile.Frame
		ms     int
	}{
		{frames: [][]profile.Frame{with("app.parseRequest", "encoding/json.Unmarshal", "encoding/json.(*decodeState).object"),
			with("app.parseRequest", "encoding/json.Unmarshal", "encoding/json.checkValid")}, ms: 8},
		{frames: [][]profile.Frame{with("app.loadCart", "database/sql.(*DB).QueryContext", "pq.(*conn).query")},
			off: with("app.loadCart", "database/sql.(*DB).QueryContext", "pq.(*conn).recv", "net.(*conn).Read", "do_syscall_64", "tcp_recvmsg", "schedule"), ms: 25},
		{frames: [][]profile.Frame{with("app.render", "html/template.(*Template).Execute", "text/template.(*state).walk"),
			with("app.render", "compress/gzip.(*Writer).Write", "compress/flate.(*compressor).deflate")}, ms: 12},
	}
	idle := fr("main.main", "runtime.gcBgMarkWorker", "runtime.gcDrain", "runtime.scanobject")
	span := byte(0)
	for th := range 6 {
		pid, name := uint32(4242), "http-worker"
		if th >= 4 {
			pid, name = 5151, "grpc-worker"
		}
		tid := pid + 1 + uint32(th)
		at := time.Duration(r.IntN(30)) * tick
		for at < 2*time.Second {
			span++
			link := profile.Link{TraceID: [16]byte{0x4b, span / 3}, SpanID: [8]byte{0x5c, span}}
			for _, ph := range phases {
				n := ph.ms/2 + r.IntN(ph.ms)
				for i := range n {
					s := profile.Sample{Kind: profile.OnCPU, PID: pid, TID: tid, ThreadName: name, Link: link, Value: 1,
						Time: p.Start.Add(at), Frames: ph.frames[r.IntN(len(ph.frames))]}
					if ph.off != nil && i == n/2 {
						blocked := time.Duration(10+r.IntN(40)) * tick
						at += blocked
						s.Kind, s.Value, s.Frames, s.State, s.Reason = profile.OffCPU, int64(blocked), ph.off, "S", "tcp_recvmsg"
						s.Time = p.Start.Add(at)
					}
					p.Samples = append(p.Samples, s)
					at += tick
				}
			}
			for range r.IntN(40) {
				if r.IntN(3) == 0 {
					p.Samples = append(p.Samples, profile.Sample{Kind: profile.OnCPU, PID: pid, TID: tid, ThreadName: name,
						Value: 1, Time: p.Start.Add(at), Frames: idle})
				}
				at += tick
			}
		}
	}
	return p
}

// TestScreenshot renders a demo profile with a span selected and writes a
// PNG to $SPANPROF_SCREENSHOT (make demo uses it).
func TestScreenshot(t *testing.T) {
	path := os.Getenv("SPANPROF_SCREENSHOT")
	if path == "" {
		t.Skip("skip: set SPANPROF_SCREENSHOT=FILE.png to write a screenshot of the viewer")
	}
	p := newPage(t, static("demo.otlp.json", demoProfile()), static("small.otlp.json", exporttest.Small()))
	p.open("/?search=json")
	p.do(`document.querySelector('#spans tr[data-link="5"]').click()`)
	if got := eval[string](p, `document.getElementById('timeline').dataset.spans`); got == "0" {
		t.Fatal("demo timeline shows no spans")
	}
	screenshot(t, p, path)
	p.checkNoErrors()
}
