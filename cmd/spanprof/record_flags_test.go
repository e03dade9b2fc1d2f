package main

import (
	"io"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/pipeline"
)

// TestRecordBudgetFlags: record's memory budget reaches its pipeline as
// the flags say, with the defaults of a one-shot recording, and values
// the kernel or the symbolizer cannot take are one-line errors.
func TestRecordBudgetFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    pipeline.Budget
		wantErr string
	}{
		{"defaults", nil, pipeline.Budget{CacheMiB: 64, DWARFSpillDir: pipeline.DefaultDWARFSpillDir(), RingMiB: 8, GCPercent: 50}, ""},
		{"set", []string{"--symbol-cache-mib", "16", "--dwarf-cache-dir", "/var/tmp/d", "--ring-mib", "32"},
			pipeline.Budget{CacheMiB: 16, DWARFSpillDir: "/var/tmp/d", RingMiB: 32, GCPercent: 50}, ""},
		{"no spill", []string{"--dwarf-cache-dir", ""}, pipeline.Budget{CacheMiB: 64, RingMiB: 8, GCPercent: 50}, ""},
		{"ring not a power of two", []string{"--ring-mib", "3"}, pipeline.Budget{}, "--ring-mib 3: want a power of two from 2 to 1024"},
		{"ring too small", []string{"--ring-mib", "1"}, pipeline.Budget{}, "--ring-mib 1: want a power of two from 2 to 1024"},
		{"no cache", []string{"--symbol-cache-mib", "0"}, pipeline.Budget{}, "--symbol-cache-mib 0: want at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := parseRecordFlags(tt.args, io.Discard, io.Discard)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := f.pipeline(nil).Budget; got != tt.want {
				t.Errorf("budget %+v, want %+v", got, tt.want)
			}
		})
	}
}
