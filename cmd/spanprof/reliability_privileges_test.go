package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
)

// TestReliabilityDropCapabilities drops to the runtime set in a child test
// process (the drop cannot be undone), built without cgo as the release
// is and with cgo as a plain `go build` on a machine with gcc is, and
// checks every thread of it.
func TestReliabilityDropCapabilities(t *testing.T) {
	if os.Getenv("SPANPROF_DROP_CHILD") == "1" {
		kept, err := dropCapabilities(runtimeCapabilities())
		if err != nil {
			t.Fatalf("drop: %v", err)
		}
		t.Logf("cgo %v: kept %v", cgoEnabled(), kept)
		// Gone for good: CAP_SYS_ADMIN cannot come back.
		if c, _ := threadCaps(); c.effective&(1<<capSysAdmin) != 0 && lastCap() >= capBPF {
			t.Fatal("CAP_SYS_ADMIN still effective")
		}
		if err := unixCapsetAll(); err == nil {
			t.Fatal("regained CAP_SYS_ADMIN after the drop")
		}
		return
	}
	testutil.RequireRoot(t, "needs root: drops capabilities it must have first")
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to build the children")
	}
	for _, cgo := range []string{"0", "1"} {
		t.Run("CGO_ENABLED="+cgo, func(t *testing.T) {
			if cgo == "1" {
				if _, err := exec.LookPath("gcc"); err != nil {
					t.Skip("no gcc for a cgo build")
				}
			}
			cmd := exec.Command("go", "test", "-count=1", "-run", "^TestReliabilityDropCapabilities$", "-v", ".")
			cmd.Env = append(os.Environ(), "SPANPROF_DROP_CHILD=1", "CGO_ENABLED="+cgo)
			out, err := cmd.CombinedOutput()
			t.Logf("child:\n%s", out)
			if err != nil {
				t.Fatalf("child failed: %v", err)
			}
			if want := "cgo " + map[string]string{"0": "false", "1": "true"}[cgo]; !strings.Contains(string(out), want) {
				t.Fatalf("child was not built as asked: no %q", want)
			}
			for _, c := range []string{"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE"} {
				if !strings.Contains(string(out), c) {
					t.Errorf("child did not keep %s", c)
				}
			}
		})
	}
}

// unixCapsetAll tries to raise every capability again on this thread.
func unixCapsetAll() error {
	_, err := dropCapabilities([]capability{capSysAdmin})
	if err != nil {
		return err
	}
	c, _ := threadCaps()
	if c.effective&(1<<capSysAdmin) == 0 {
		return errors.New("not regained")
	}
	return nil
}
