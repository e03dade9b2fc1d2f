package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestReliabilityDropCapabilities drops to the runtime set in a child test
// process (the drop cannot be undone), built with CGO_ENABLED=0 as the
// release is, and checks every thread of it.
func TestReliabilityDropCapabilities(t *testing.T) {
	if os.Getenv("SPANPROF_DROP_CHILD") == "1" {
		kept, err := dropCapabilities(runtimeCapabilities())
		if err != nil {
			t.Fatalf("drop: %v", err)
		}
		t.Logf("kept %v", kept)
		// Gone for good: CAP_SYS_ADMIN cannot come back.
		if c, _ := threadCaps(); c.effective&(1<<capSysAdmin) != 0 && lastCap() >= capBPF {
			t.Fatal("CAP_SYS_ADMIN still effective")
		}
		if err := unixCapsetAll(); err == nil {
			t.Fatal("regained CAP_SYS_ADMIN after the drop")
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: drops capabilities it must have first")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to build the child without cgo")
	}
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestReliabilityDropCapabilities$", "-v", ".")
	cmd.Env = append(os.Environ(), "SPANPROF_DROP_CHILD=1", "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Fatalf("child failed: %v", err)
	}
	for _, c := range []string{"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE"} {
		if !strings.Contains(string(out), c) {
			t.Errorf("child did not keep %s", c)
		}
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

func TestReliabilityDropCapabilitiesCgo(t *testing.T) {
	// In this (cgo) test binary the drop must refuse clearly rather than
	// change one thread and leave the others privileged.
	if os.Getenv("SPANPROF_DROP_CHILD") == "1" || os.Geteuid() != 0 {
		t.Skip("runs in the parent, as root")
	}
	if !cgoEnabled() {
		t.Skip("built without cgo")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestReliabilityDropCgoChild$", "-test.v")
	cmd.Env = append(os.Environ(), "SPANPROF_DROP_CGO_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestReliabilityDropCgoChild(t *testing.T) {
	if os.Getenv("SPANPROF_DROP_CGO_CHILD") != "1" {
		t.Skip("child of TestReliabilityDropCapabilitiesCgo")
	}
	_, err := dropCapabilities(runtimeCapabilities())
	if !errors.Is(err, errCapsCgo) {
		t.Fatalf("drop in a cgo binary: %v, want errCapsCgo", err)
	}
	if c, _ := threadCaps(); c.effective&(1<<capSysAdmin) == 0 {
		t.Fatal("a refused drop changed this thread")
	}
}
