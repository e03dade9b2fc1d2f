package flamegraph

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/profile"
)

// stackNames resolves a viewer stack to "a;b;c", root first.
func stackNames(d *Data, s int32) string {
	var names []string
	for _, f := range d.Stacks[s] {
		names = append(names, d.Strings[d.Frames[f][0]])
	}
	return strings.Join(names, ";")
}

func TestNewData(t *testing.T) {
	d := NewData(exporttest.Small())
	c := d.Samples
	if n := len(c.Kind); n != 10 || len(c.Thread) != n || len(c.Stack) != n || len(c.Link) != n || len(c.Time) != n || len(c.Value) != n {
		t.Fatalf("columns of unequal or wrong length: %d", n)
	}
	if want := []string{"", "", ""}; len(d.Links) != len(want) || d.Links[0] != [2]string{"", ""} {
		t.Fatalf("links = %v, want the empty link and spans A, B", d.Links)
	}
	if d.StartUnixNano != "1735787045000000000" || d.EndMicros != 2_000_000 || d.PeriodNanos != 10_000_000 {
		t.Errorf("start %s end %d period %d", d.StartUnixNano, d.EndMicros, d.PeriodNanos)
	}
	tests := []struct {
		name  string
		i     int
		kind  int8
		time  int64
		value int64
		link  string
		stack string
		// thread is "pid/tid name".
		thread string
	}{
		{"first on-CPU of span A", 0, 0, 1000, 1, exporttest.LinkA.SpanIDHex(), "main.main;main.handle;do_syscall_64", "100/101 server"},
		{"span B", 2, 0, 3000, 1, exporttest.LinkB.SpanIDHex(), "main.main;main.handle;do_syscall_64", "100/101 server"},
		{"no span", 3, 0, 4000, 1, "", "main.main;main.handle;do_syscall_64", "100/101 server"},
		{"unsymbolized", 4, 0, 5000, 1, exporttest.LinkA.SpanIDHex(), "main.main;libnoid.so+0x1234", "100/102 server-w"},
		{"inlined and unmapped", 6, 0, 7000, 1, "", "main.main;0x1234", "200/200 worker"},
		{"off-CPU", 9, 1, 10000, 2_000_000, exporttest.LinkA.SpanIDHex(), "main.main;main.handle;pthread_cond_wait;schedule", "100/101 server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := d.Threads[c.Thread[tt.i]]
			pr := d.Processes[th[0]]
			thread := strings.Join([]string{
				jsonNum(pr[0]) + "/" + jsonNum(th[1]), d.Strings[th[2]]}, " ")
			got := []string{jsonNum(int64(c.Kind[tt.i])), jsonNum(c.Time[tt.i]), jsonNum(c.Value[tt.i]),
				d.Links[c.Link[tt.i]][1], stackNames(d, c.Stack[tt.i]), thread}
			want := []string{jsonNum(int64(tt.kind)), jsonNum(tt.time), jsonNum(tt.value), tt.link, tt.stack, tt.thread}
			if !slices.Equal(got, want) {
				t.Errorf("sample %d = %q, want %q", tt.i, got, want)
			}
		})
	}
	// The inlined helper sits above its caller in the worker's other stack.
	if got := stackNames(d, c.Stack[5]); got != "main.main;main.outer;main.helper" {
		t.Errorf("inlined stack = %q", got)
	}
}

func jsonNum(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestNewDataOrdersAndOffsetsTimes(t *testing.T) {
	p := &profile.Profile{Start: exporttest.T0.Add(time.Second), Processes: map[uint32]*profile.Process{}}
	for i, ms := range []int{30, 10, 0, 20} {
		s := profile.Sample{PID: 1, TID: 1, Value: int64(i + 1)}
		if ms > 0 {
			s.Time = exporttest.T0.Add(time.Duration(ms) * time.Millisecond)
		}
		p.Samples = append(p.Samples, s)
	}
	d := NewData(p)
	// t0 is the earliest event (10 ms), before Start; the untimed event sorts first.
	if want := []int64{-1, 0, 10_000, 20_000}; !slices.Equal(d.Samples.Time, want) {
		t.Errorf("times = %v, want %v", d.Samples.Time, want)
	}
	if want := []int64{3, 2, 4, 1}; !slices.Equal(d.Samples.Value, want) {
		t.Errorf("values = %v, want %v", d.Samples.Value, want)
	}
	if d.EndMicros != 20_000 {
		t.Errorf("end = %d, want the last event 20000 (the profile has no End)", d.EndMicros)
	}
}

func TestWritePage(t *testing.T) {
	p := exporttest.Small()
	p.Processes[200].ExeName = "</script><script>alert(1)</script>"
	var buf bytes.Buffer
	if err := Write(&buf, p); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	// The page must be self-contained: nothing fetched at view time.
	for _, re := range []string{`(?i)<script[^>]+src=`, `(?i)<link[^>]+href=`, `(?i)url\(\s*['"]?[a-z/.]`, `(?i)@import`, `(?i)https?://`} {
		if m := regexp.MustCompile(re).FindString(page); m != "" {
			t.Errorf("page references the network: %q", m)
		}
	}
	if n := strings.Count(strings.ToLower(page), "</script>"); n != 3 {
		t.Errorf("%d </script> tags, want 3 (meta, data, code): a name escaped its element", n)
	}
	start := strings.Index(page, `id="spanprof-data">`) + len(`id="spanprof-data">`)
	end := strings.Index(page[start:], "</script>")
	// Columns must be JSON arrays: encoding/json would write a []uint8 as
	// a base64 string, which the viewer cannot read.
	if !strings.Contains(page[start:start+end], `"kind":[0,0,`) {
		t.Errorf("kind column is not a JSON array of numbers")
	}
	var d Data
	if err := json.Unmarshal([]byte(page[start:start+end]), &d); err != nil {
		t.Fatalf("embedded data: %v", err)
	}
	if d.Version != DataVersion || len(d.Samples.Kind) != len(p.Samples) {
		t.Errorf("embedded data version %d with %d samples", d.Version, len(d.Samples.Kind))
	}
	for _, name := range scriptOrder {
		if !strings.Contains(page, "// "+name+"\n") {
			t.Errorf("script %s not inlined", name)
		}
	}
}

func BenchmarkWrite100k(b *testing.B) {
	p := exporttest.Synthetic(100_000)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := Write(&buf, p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/page")
}
