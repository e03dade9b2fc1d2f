package summary

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/export/exporttest"
	"github.com/spanprof/spanprof/internal/profile"
)

func TestWrite(t *testing.T) {
	onOnly := exporttest.Small()
	onOnly.Samples = onOnly.Samples[:7]
	onOnly.Lost = nil
	tests := []struct {
		name    string
		p       *profile.Profile
		top     int
		want    []string // lines that must appear, in order
		notWant []string
	}{
		{
			name: "full", p: exporttest.Small(), top: 2,
			want: []string{
				"spanprof: 2s from 2025-01-02T03:04:05Z, 100 Hz, 2 processes",
				"on-CPU: 7 samples (70ms CPU); off-CPU: 3 events, 10ms blocked",
				"lost: ringbuf_full=3 unwind_error=1",
				"top 2 functions by self on-CPU samples",
				"     4  57.1%      4   57.1%  do_syscall_64",
				"top 2 functions by total on-CPU samples",
				"     0   0.0%      7  100.0%  main.main",
				"top 2 functions by self off-CPU time",
				"  10ms  100.0%   10ms  100.0%  schedule",
				"100  server   checkout  5       80.0%    10ms     100.0%",
				"200  worker             2       0.0%     -        -",
			},
			notWant: []string{"main.outer"},
		},
		{
			name: "on-CPU only, nothing lost", p: onOnly, top: 0,
			want: []string{
				"on-CPU: 7 samples (70ms CPU)\n",
				"lost: none",
				"top 7 functions by self on-CPU samples",
				"main.outer",
			},
			notWant: []string{"off-CPU time", "off-CPU:"},
		},
		{
			name: "empty", p: &profile.Profile{}, top: 5,
			want:    []string{"0 processes", "on-CPU: 0 samples", "lost: none"},
			notWant: []string{"top", "processes ("},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Write(&buf, tt.p, tt.top); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			rest := out
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("missing (or out of order) %q in:\n%s", w, out)
				}
				rest = rest[i+len(w):]
			}
			for _, w := range tt.notWant {
				if strings.Contains(out, w) {
					t.Errorf("unexpected %q in:\n%s", w, out)
				}
			}
		})
	}
}

// TestWriteReadable: totals are rounded, nouns agree with their counts,
// and the process table starts with the busiest and stops at 20 rows.
func TestWriteReadable(t *testing.T) {
	fn := profile.Frame{Address: 0x401000, Function: "main.spin", Mapping: &profile.Mapping{Start: 0x400000, Limit: 0x500000, Path: "/bin/x"}}
	p := &profile.Profile{Start: exporttest.T0, End: exporttest.T0.Add(2 * time.Second), Frequency: 99, Processes: map[uint32]*profile.Process{}}
	// 25 processes; pid 1000+i takes i+1 samples: 325 in all.
	for i := range 25 {
		pid := uint32(1000 + i)
		p.Processes[pid] = &profile.Process{PID: pid, ExeName: fmt.Sprintf("p%d", i)}
		for range i + 1 {
			p.Samples = append(p.Samples, profile.Sample{Kind: profile.OnCPU, PID: pid, TID: pid, Frames: []profile.Frame{fn}, Time: exporttest.T0, Value: 1})
		}
	}
	var buf bytes.Buffer
	if err := Write(&buf, p, 3); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	// 325 samples at 99 Hz are 3.2828...s; 1+2+3+4+5 = 15 are left out.
	for _, w := range []string{"25 processes", "on-CPU: 325 samples (3.28s CPU)", "\n1024  p24", "… 5 more processes: 15 on-CPU samples\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("summary lacks %q:\n%s", w, out)
		}
	}
	if i, j := strings.Index(out, "\n1024  p24"), strings.Index(out, "\n1005  p5 "); i < 0 || j < 0 || i > j {
		t.Errorf("not busiest first:\n%s", out)
	}
	if strings.Contains(out, "\n1004  ") {
		t.Errorf("the 21st process is listed:\n%s", out)
	}

	// 198 samples at 99 Hz are 1.99999998s: "2s".
	one := &profile.Profile{Frequency: 99, Processes: map[uint32]*profile.Process{7: {PID: 7, ExeName: "x"}}}
	for range 198 {
		one.Samples = append(one.Samples, profile.Sample{Kind: profile.OnCPU, PID: 7, TID: 7, Frames: []profile.Frame{fn}, Value: 1})
	}
	buf.Reset()
	if err := Write(&buf, one, 3); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, ", 99 Hz, 1 process\n") || !strings.Contains(out, "on-CPU: 198 samples (2s CPU)") {
		t.Errorf("summary:\n%s", out)
	}
	one.Samples = one.Samples[:1]
	buf.Reset()
	Write(&buf, one, 3)
	if out := buf.String(); !strings.Contains(out, "on-CPU: 1 sample (10.1ms CPU)") {
		t.Errorf("summary:\n%s", out)
	}
}
