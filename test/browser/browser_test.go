// Package browser drives the flame graph viewer in headless Chromium
// against the `spanprof serve` handler: what the tests check is what a
// person sees in the page, including the render time of a 100k-event
// profile. The tests skip when /usr/bin/chromium is missing (install
// Debian's chromium package; CI does).
package browser

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/spanprof/spanprof/internal/export"
	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/internal/web"
)

const chromium = "/usr/bin/chromium"

// page is one browser tab on the test server, collecting what the page
// reports as errors (exceptions, console errors, CSP violations).
type page struct {
	t    *testing.T
	ctx  context.Context
	base string
	mu   sync.Mutex
	errs []string
}

func newPage(t *testing.T, sources ...web.Source) *page {
	testutil.RequireLong(t, "drives chromium")
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("skip: %s not found; install Debian's chromium package (apt-get install -y chromium) to run the browser tests", chromium)
	}
	h, err := web.NewHandler(slog.New(slog.NewTextHandler(io.Discard, nil)), sources...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := web.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return newBrowser(t, "http://"+ln.Addr().(*net.TCPAddr).String())
}

// newBrowser starts headless Chromium for pages of the server at base.
func newBrowser(t *testing.T, base string) *page {
	testutil.RequireLong(t, "drives chromium")
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("skip: %s not found; install Debian's chromium package (apt-get install -y chromium) to run the browser tests", chromium)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	p := &page{t: t, ctx: ctx, base: base}
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				msg = "console error"
				for _, a := range e.Args {
					msg += " " + string(a.Value) + a.Description
				}
			}
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError {
				msg = "browser log: " + e.Entry.Text
			}
		}
		if msg != "" {
			p.mu.Lock()
			p.errs = append(p.errs, msg)
			p.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return p
}

// open loads path and waits for the first render.
func (p *page) open(path string) {
	p.t.Helper()
	err := chromedp.Do(p.ctx,
		chromedp.Navigate(p.base+path),
		chromedp.Action[chromedp.Void](func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Poll[bool](`document.documentElement.dataset.renderCount >= 1 || !!document.documentElement.dataset.error`,
				chromedp.WithPollingTimeout(30*time.Second))(ctx, t)
			return chromedp.Void{}, err
		}),
	)
	if err != nil {
		p.t.Fatalf("open %s: %v", path, err)
	}
	if e := eval[string](p, `document.documentElement.dataset.error || ""`); e != "" {
		p.t.Fatalf("page error: %s", e)
	}
}

// do runs JS that changes the view and waits for the render it causes.
func (p *page) do(js string) {
	p.t.Helper()
	n := eval[string](p, `document.documentElement.dataset.renderCount`)
	eval[any](p, js)
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](`document.documentElement.dataset.renderCount !== "`+n+`"`,
		chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		p.t.Fatalf("no render after %s: %v", js, err)
	}
}

func eval[T any](p *page, js string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

func (p *page) frames() []string {
	p.t.Helper()
	f := eval[[]string](p, `spanprof.frames()`)
	slices.Sort(f)
	return slices.Compact(f)
}

func (p *page) checkNoErrors() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.errs {
		p.t.Errorf("page reported: %s", e)
	}
	p.errs = nil
}

func static(name string, pr *profile.Profile) web.Source {
	return web.Source{Name: name, Profile: func() (*profile.Profile, error) { return pr, nil }}
}

func screenshot(t *testing.T, p *page, path string) {
	t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot written to %s", path)
}

var (
	spanA = exporttest.LinkA.SpanIDHex()
	spanB = exporttest.LinkB.SpanIDHex()
)

func TestViewer(t *testing.T) {
	noSpans := exporttest.Small()
	for i := range noSpans.Samples {
		noSpans.Samples[i].Link = profile.Link{}
	}
	p := newPage(t, static("small.otlp.json", exporttest.Small()), static("other.pb.gz", exporttest.Synthetic(200)),
		static("nospans.otlp.json", noSpans))
	all := []string{"0x1234", "all", "do_syscall_64", "libnoid.so+0x1234", "main.handle", "main.helper", "main.main",
		"main.outer", "server (100)", "worker (200)"}
	tests := []struct {
		name   string
		path   string
		action string // JS run after loading; must cause a render
		frames []string
		spans  string // span count the timeline reports
		url    string // the query the page shows afterwards
	}{
		{name: "flame graph of every on-CPU frame", path: "/", frames: all, spans: "2"},
		{name: "span_id in the URL", path: "/?span_id=" + spanB,
			frames: []string{"all", "do_syscall_64", "main.handle", "main.main", "server (100)"}, spans: "2"},
		{name: "span_id typed into the filter", path: "/",
			action: `const i = document.getElementById('f-span'); i.value = '` + spanA + `'; i.dispatchEvent(new Event('change'))`,
			frames: []string{"all", "do_syscall_64", "libnoid.so+0x1234", "main.handle", "main.main", "server (100)"},
			spans:  "2", url: "span_id=" + spanA},
		{name: "span row clicked", path: "/",
			action: `document.querySelector('#spans tr[data-link="2"]').click()`,
			frames: []string{"all", "do_syscall_64", "main.handle", "main.main", "server (100)"},
			spans:  "2", url: "span_id=" + spanB},
		{name: "thread filter", path: "/?tid=200", frames: []string{"0x1234", "all", "main.helper", "main.main", "main.outer", "worker (200)"}, spans: "2"},
		{name: "process filter", path: "/?pid=100&trace_id=1111", frames: []string{"all", "do_syscall_64", "libnoid.so+0x1234", "main.handle", "main.main", "server (100)"}, spans: "2"},
		{name: "time range 4.5-6.5 ms", path: "/?from=4.5&to=6.5",
			frames: []string{"all", "libnoid.so+0x1234", "main.helper", "main.main", "main.outer", "server (100)", "worker (200)"}, spans: "2"},
		{name: "off-CPU toggle", path: "/",
			action: `document.querySelector('input[name=kind][value=off]').click()`,
			frames: []string{"all", "main.handle", "main.main", "pthread_cond_wait", "schedule", "server (100)"},
			spans:  "1", url: "kind=off"},
		{name: "no match", path: "/?span_id=ffff", frames: nil, spans: "2"},
		{name: "profile without spans", path: "/?file=nospans.otlp.json&span_id=22", frames: nil, spans: "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.t = t
			p.open(tt.path)
			if tt.action != "" {
				p.do(tt.action)
			}
			if got := p.frames(); !slices.Equal(got, tt.frames) {
				t.Errorf("flame graph frames = %q, want %q", got, tt.frames)
			}
			if got := eval[string](p, `document.getElementById('timeline').dataset.spans`); got != tt.spans {
				t.Errorf("timeline shows %s spans, want %s", got, tt.spans)
			}
			if got := eval[string](p, `location.search`); !strings.Contains(got, tt.url) {
				t.Errorf("URL query %q lacks %q", got, tt.url)
			}
			p.checkNoErrors()
		})
	}
	t.Run("canvas painted", func(t *testing.T) {
		p.t = t
		p.open("/")
		// The root frame spans the width: its pixel must not be blank.
		px := eval[[]int](p, `Array.from(document.getElementById('flame').getContext('2d').getImageData(5, 5, 1, 1).data)`)
		if len(px) != 4 || px[3] == 0 || (px[0] == 255 && px[1] == 255 && px[2] == 255) {
			t.Errorf("flame graph root pixel = %v, want a painted frame", px)
		}
		if rows := eval[string](p, `document.getElementById('spans').dataset.rows`); rows != "2" {
			t.Errorf("span table has %s rows, want 2", rows)
		}
	})
	t.Run("search highlights", func(t *testing.T) {
		p.t = t
		p.open("/?search=handle")
		// main.handle carries 4 of the 7 on-CPU events.
		if got := eval[string](p, `document.getElementById('flame').dataset.matched`); got != "4" {
			t.Errorf("search matched %q, want 4", got)
		}
	})
	t.Run("timeline hover and click", func(t *testing.T) {
		p.t = t
		p.open("/")
		// Point at thread 101's first event (span A, 1 ms).
		xy := eval[[]float64](p, `(() => {
			const c = document.getElementById('timeline'), tl = spanprof.timeline, m = spanprof.model;
			const r = c.getBoundingClientRect(), i = 0, row = tl.rows.indexOf(m.thread[i]);
			return [r.left + SP.TL.LABEL + m.time[i] * tl.scale + 0.5, r.top + SP.TL.AXIS + row * SP.TL.ROW + SP.TL.ROW / 2];
		})()`)
		if err := chromedp.Do(p.ctx, chromedp.MouseEvent("mouseMoved", xy[0], xy[1])); err != nil {
			t.Fatal(err)
		}
		tip := eval[string](p, `document.getElementById('tip').hidden ? '' : document.getElementById('tip').innerText`)
		for _, want := range []string{"do_syscall_64", "span_id " + spanA, "trace_id " + exporttest.LinkA.TraceIDHex(), "101"} {
			if !strings.Contains(tip, want) {
				t.Errorf("tooltip %q lacks %q", tip, want)
			}
		}
		n := eval[string](p, `document.documentElement.dataset.renderCount`)
		if err := chromedp.Do(p.ctx, chromedp.MouseClickXY(xy[0], xy[1])); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](`document.documentElement.dataset.renderCount !== "`+n+`"`,
			chromedp.WithPollingTimeout(5*time.Second))); err != nil {
			t.Fatalf("click on a tick did not filter: %v", err)
		}
		if got := eval[string](p, `spanprof.state.span`); got != spanA {
			t.Errorf("span filter after click = %q, want %q", got, spanA)
		}
		p.checkNoErrors()
	})
	t.Run("file picker", func(t *testing.T) {
		p.t = t
		p.open("/")
		opts := eval[[]string](p, `Array.from(document.getElementById('file').options).map(o => o.value)`)
		if !slices.Equal(opts, []string{"small.otlp.json", "other.pb.gz", "nospans.otlp.json"}) || eval[bool](p, `document.getElementById('file').hidden`) {
			t.Errorf("file picker options %q (or hidden)", opts)
		}
	})
}

// uniqueStacks gives each event of p its own stack (a distinct leaf), the
// worst case for the flame graph's tree building.
func uniqueStacks(p *profile.Profile) *profile.Profile {
	for i := range p.Samples {
		s := &p.Samples[i]
		leaf := profile.Frame{Address: 0x7000_0000 + uint64(i), Function: fmt.Sprintf("leaf%d", i)}
		s.Frames = append([]profile.Frame{leaf}, s.Frames...)
	}
	return p
}

// TestLargeProfile measures the render of 100k events; the numbers are
// logged, not asserted, because they depend on the machine.
func TestLargeProfile(t *testing.T) {
	testutil.RequireLong(t, "renders 100k events in chromium")
	const n = 100_000
	big := exporttest.Synthetic(n)
	p := newPage(t, static("synthetic.otlp.pb", big), static("unique.otlp.pb", uniqueStacks(exporttest.Synthetic(n))))
	start := time.Now()
	p.open("/?file=unique.otlp.pb")
	_, _ = chromedp.Run(p.ctx, chromedp.Poll[bool](`!!document.documentElement.dataset.paintMs`, chromedp.WithPollingTimeout(10*time.Second)))
	t.Logf("100k events with 100k distinct stacks: page fetched and first render done in %v; in page: %s",
		time.Since(start).Round(time.Millisecond), eval[string](p, `['loadMs','renderMs','paintMs'].map(k => k + '=' + document.documentElement.dataset[k]).join(' ')`))
	start = time.Now()
	p.open("/")
	load := time.Since(start)
	events := eval[int](p, `spanprof.model.n`)
	if events != n {
		t.Fatalf("page holds %d events, want %d", events, n)
	}
	// Synthetic links every fourth event to no span and the rest to 64 spans.
	if got := eval[string](p, `document.getElementById('timeline').dataset.spans`); got != "64" {
		t.Errorf("timeline shows %s spans, want 64", got)
	}
	if f := len(p.frames()); f < 100 {
		t.Errorf("only %d distinct frames drawn", f)
	}
	timings := func() string {
		return eval[string](p, `['loadMs','renderMs','paintMs'].map(k => k + '=' + document.documentElement.dataset[k]).join(' ')`)
	}
	_, _ = chromedp.Run(p.ctx, chromedp.Poll[bool](`!!document.documentElement.dataset.paintMs`, chromedp.WithPollingTimeout(10*time.Second)))
	t.Logf("100k events: page fetched and first render done in %v; in page: %s", load.Round(time.Millisecond), timings())
	p.do(`document.querySelector('input[name=kind][value=off]').click()`)
	t.Logf("100k events, off-CPU view: %s", timings())
	p.do(`spanprof.state.span = '` + fmt.Sprintf("%02x", 7) + `'; spanprof.update()`)
	t.Logf("100k events, span filter: %s", timings())
	p.do(`spanprof.state.kind = 0; spanprof.state.span = ''; spanprof.update()`)
	if path := os.Getenv("SPANPROF_SCREENSHOT"); path != "" {
		screenshot(t, p, path)
	}
	p.checkNoErrors()
}

// TestStandalonePage opens the `.html` output from disk: the page must
// work with no server at all.
func TestStandalonePage(t *testing.T) {
	p := newPage(t, static("unused", exporttest.Small()))
	path := filepath.Join(t.TempDir(), "profile.html")
	if err := export.WriteFile(path, exporttest.Small()); err != nil {
		t.Fatal(err)
	}
	p.base = "file://"
	p.open(path + "?span_id=" + spanB)
	want := []string{"all", "do_syscall_64", "main.handle", "main.main", "server (100)"}
	if got := p.frames(); !slices.Equal(got, want) {
		t.Errorf("frames = %q, want %q", got, want)
	}
	if got := eval[string](p, `document.getElementById('timeline').dataset.spans`); got != "2" {
		t.Errorf("timeline shows %s spans, want 2", got)
	}
	p.checkNoErrors()
}
