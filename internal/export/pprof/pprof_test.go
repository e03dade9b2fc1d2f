package pprof

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	gpprof "github.com/google/pprof/profile"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/profile"
)

func writeSmall(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "small.pb.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(f, exporttest.Small()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// describe renders a parsed sample as "stack values labels", stack leaf
// first with inlined functions joined by "|".
func describe(s *gpprof.Sample) string {
	var locs []string
	for _, loc := range s.Location {
		var fns []string
		for _, ln := range loc.Line {
			fns = append(fns, ln.Function.Name)
		}
		if len(fns) == 0 {
			file := ""
			if loc.Mapping != nil {
				file = loc.Mapping.File
			}
			fns = append(fns, fmt.Sprintf("%s@%#x", file, loc.Address))
		}
		locs = append(locs, strings.Join(fns, "|"))
	}
	var keys []string
	for k := range s.Label {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var labels []string
	for _, k := range keys {
		labels = append(labels, k+"="+strings.Join(s.Label[k], ","))
	}
	return fmt.Sprintf("%s %v %s", strings.Join(locs, ";"), s.Value, strings.Join(labels, " "))
}

func TestWriteParses(t *testing.T) {
	raw, err := os.ReadFile(writeSmall(t))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		t.Fatal("output is not gzipped")
	}
	prof, err := gpprof.ParseData(raw)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	var types []string
	for _, st := range prof.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if want := []string{"samples/count", "cpu/nanoseconds", "off_cpu/nanoseconds"}; !reflect.DeepEqual(types, want) {
		t.Errorf("sample types %v, want %v", types, want)
	}
	if prof.Period != 10_000_000 || prof.TimeNanos != exporttest.T0.UnixNano() || prof.DurationNanos != 2e9 {
		t.Errorf("period %d time %d duration %d", prof.Period, prof.TimeNanos, prof.DurationNanos)
	}
	a, b := exporttest.LinkA, exporttest.LinkB
	srv := "pid=100 process=server"
	spanA := "span_id=" + a.SpanIDHex()
	spanB := "span_id=" + b.SpanIDHex()
	trace := "trace_id=" + a.TraceIDHex()
	want := []string{
		"do_syscall_64;main.handle;main.main [2 20000000 0] " + srv + " " + spanA + " thread.id=101 thread.name=server " + trace,
		"do_syscall_64;main.handle;main.main [1 10000000 0] " + srv + " " + spanB + " thread.id=101 thread.name=server " + trace,
		"do_syscall_64;main.handle;main.main [1 10000000 0] " + srv + " thread.id=101 thread.name=server",
		"/opt/lib/libnoid.so@0x7f2000000234;main.main [1 10000000 0] " + srv + " " + spanA + " thread.id=102 thread.name=server-w " + trace,
		"schedule;pthread_cond_wait;main.handle;main.main [0 0 8000000] off_cpu.reason=futex_wait_queue " + srv + " " + spanA + " thread.id=101 thread.name=server thread.state=S " + trace,
		"schedule;pthread_cond_wait;main.handle;main.main [0 0 2000000] off_cpu.reason=io_schedule " + srv + " " + spanA + " thread.id=101 thread.name=server thread.state=D " + trace,
		"main.helper|main.outer;main.main [1 10000000 0] pid=200 process=worker thread.id=200 thread.name=worker",
		"@0x1234;main.main [1 10000000 0] pid=200 process=worker thread.id=200 thread.name=worker",
	}
	var got []string
	for _, s := range prof.Sample {
		got = append(got, describe(s))
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("samples:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	if f := prof.Mapping[0].File; f != "/usr/bin/server" {
		t.Errorf("first mapping %q, want the executable /usr/bin/server", f)
	}
	builds := map[string]string{}
	for _, m := range prof.Mapping {
		builds[m.File] = m.BuildID
	}
	wantBuilds := map[string]string{
		"/usr/bin/server":                 exporttest.ServerBuildID,
		"/lib/x86_64-linux-gnu/libc.so.6": exporttest.LibcBuildID,
		"/opt/lib/libnoid.so":             "",
		profile.KernelMappingPath:         "",
	}
	if !reflect.DeepEqual(builds, wantBuilds) {
		t.Errorf("mapping build ids %v, want %v", builds, wantBuilds)
	}
}

func TestOnCPUOnlyHasTwoSampleTypes(t *testing.T) {
	p := exporttest.Small()
	p.Samples = p.Samples[:2]
	prof, err := Build(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.SampleType) != 2 || len(prof.Sample) != 1 || !reflect.DeepEqual(prof.Sample[0].Value, []int64{2, 20_000_000}) {
		t.Errorf("got %d sample types, samples %v", len(prof.SampleType), prof.Sample)
	}
}

// TestGoToolPprof checks that the real pprof tool reads the file and that
// the string labels work with -tagfocus.
func TestGoToolPprof(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go binary not found: ", err)
	}
	path := writeSmall(t)
	tests := []struct {
		name    string
		args    []string
		want    []string
		notWant []string
	}{
		{"top", []string{"-top"}, []string{"main.main", "main.handle", "do_syscall_64"}, nil},
		{"off-cpu", []string{"-top", "-sample_index=off_cpu"}, []string{"schedule", "10ms"}, nil},
		{"focus thread", []string{"-top", "-tagfocus=thread.id=^102$"}, []string{"main.main"}, []string{"do_syscall_64"}},
		{"focus span", []string{"-top", "-tagfocus=span_id=^" + exporttest.LinkB.SpanIDHex()}, []string{"do_syscall_64", "10ms"}, []string{"20ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"tool", "pprof"}, tt.args...)
			out, err := exec.Command(goBin, append(args, path)...).CombinedOutput()
			if err != nil {
				t.Fatalf("go tool pprof: %v\n%s", err, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(string(out), w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestNamedByStart: frames named by their function's start keep their
// own addresses as locations under one function, and leave the mapping
// marked as lacking symbols, so that pprof may still symbolize it.
func TestNamedByStart(t *testing.T) {
	bin := &profile.Mapping{Path: "/usr/bin/gzip", Start: 0x1000, Limit: 0x9000}
	lib := &profile.Mapping{Path: "/usr/lib/libz.so", Start: 0x10000, Limit: 0x20000}
	frame := func(addr uint64) profile.Frame {
		return profile.Frame{Address: addr, Function: "gzip+0x4290", NoSymbol: true, Mapping: bin}
	}
	p := &profile.Profile{Frequency: 99, Processes: map[uint32]*profile.Process{1: {PID: 1, ExeName: "gzip"}}}
	for _, a := range []uint64{0x4308, 0x4313, 0x431b, 0x4313} {
		p.Samples = append(p.Samples, profile.Sample{PID: 1, TID: 1, Value: 1,
			Frames: []profile.Frame{frame(a), {Address: 0x10100, Function: "deflate", Mapping: lib}}})
	}
	pp, err := Build(p)
	if err != nil {
		t.Fatal(err)
	}
	fns, locs := 0, map[uint64]bool{}
	for _, fn := range pp.Function {
		if fn.Name == "gzip+0x4290" {
			fns++
		}
	}
	for _, l := range pp.Location {
		if len(l.Line) == 1 && l.Line[0].Function.Name == "gzip+0x4290" {
			locs[l.Address] = true
		}
	}
	if fns != 1 || len(locs) != 3 {
		t.Errorf("%d functions and %d locations for gzip+0x4290, want 1 and 3 (one per address)", fns, len(locs))
	}
	for _, m := range pp.Mapping {
		if want := m.File != bin.Path; m.HasFunctions != want {
			t.Errorf("mapping %s: HasFunctions %v, want %v", m.File, m.HasFunctions, want)
		}
	}
}

// TestContextAttrLabels: the thread context's attributes are labels, and
// samples differing in them stay apart.
func TestContextAttrLabels(t *testing.T) {
	p := exporttest.Small()
	base := p.Samples[0]
	p.Samples = nil
	for _, route := range []string{"/a", "/b", "/a"} {
		s := base
		s.Attrs = profile.MakeAttrs([]profile.Attr{{Key: "http.route", Value: route}})
		p.Samples = append(p.Samples, s)
	}
	var buf bytes.Buffer
	if err := Write(&buf, p); err != nil {
		t.Fatal(err)
	}
	parsed, err := gpprof.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int64{}
	for _, s := range parsed.Sample {
		count[strings.Join(s.Label["http.route"], ",")] += s.Value[0]
	}
	if len(parsed.Sample) != 2 || count["/a"] != 2 || count["/b"] != 1 {
		t.Errorf("%d samples, counts by route %v; want 2 samples, /a 2, /b 1", len(parsed.Sample), count)
	}
}
