package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/export/otlp/conform"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/testutil"
)

// TestRecordOutputsConform records the off-CPU spans fixture (threads on
// the CPU and blocked, inside spans) into both OTLP file formats and runs
// the conformance rules over each file: the on-CPU and the off-CPU
// profiles, with the records read after the recording window closed.
// The protobuf file must be clean as profcheck counts references too.
func TestRecordOutputsConform(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Fixtures(t, "offcpu", nil)
	dir := t.TempDir()
	for _, name := range []string{"spans.otlp.pb", "spans.otlp.json"} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(dir, name)
			fix := exec.Command(filepath.Join(repoRoot, "testdata", "offcpu", "build", "spans"), filepath.Join(dir, "truth"), "2", "2")
			recordGated(t, fix, "--off-cpu", "--duration", "60s", "--output", out)
			buf, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			read := otlp.ReadProto
			if filepath.Ext(name) == ".json" {
				read = otlp.ReadJSON
			}
			prof, err := read(bytes.NewReader(buf))
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[profile.Kind]int{}
			for _, s := range prof.Samples {
				kinds[s.Kind]++
			}
			if kinds[profile.OnCPU] == 0 || kinds[profile.OffCPU] == 0 {
				t.Fatalf("want on-CPU and off-CPU samples, got %v", kinds)
			}
			if filepath.Ext(name) == ".json" {
				if err := (conform.Checker{}).CheckJSON(buf); err != nil {
					t.Error(err)
				}
				return
			}
			for _, c := range []conform.Checker{{}, {Profcheck: true}} {
				if err := c.CheckProto(buf); err != nil {
					t.Errorf("profcheck counting %v: %v", c.Profcheck, err)
				}
			}
		})
	}
}
