package summary

import (
	"bytes"
	"strings"
	"testing"

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
