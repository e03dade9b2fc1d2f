package reliability

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/internal/testutil"
)

// The pin path faults run in a private mount namespace with its own bpffs,
// so the machine's /sys/fs/bpf/spanprof (shared by every spanprof running
// on it) is never touched.

const pinFaultEnv = "SPANPROF_PIN_FAULT"

// TestReliabilityPinPathTaken: spanprof must either recover or say
// clearly, in one line, what is in its way.
func TestReliabilityPinPathTaken(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		fault string
		// ok: spanprof records (recovering); else want is in its one-line error.
		ok   bool
		want string
	}{
		// Another program pinned a different map under our name.
		{fault: "incompatible", want: "task_trace_context"},
		// The pin directory's name is taken by a map.
		{fault: "dir-is-map", ok: true, want: "task_trace_context is not pinned"},
		// A stale compatible pin (a previous spanprof) is reused.
		{fault: "stale-compatible", ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestReliabilityPinHelper$", "-test.v")
			cmd.Env = append(os.Environ(), pinFaultEnv+"="+tt.fault, "SPANPROF_BIN="+binPath)
			cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
			out, err := cmd.CombinedOutput()
			text := string(out)
			t.Logf("%s", text)
			if err != nil {
				t.Fatalf("helper: %v", err)
			}
			_, after, _ := strings.Cut(text, "SPANPROF-EXIT ")
			code, _, _ := strings.Cut(after, "\n")
			if tt.ok && code != "0" {
				t.Fatalf("spanprof did not recover from %s (exit %s)", tt.fault, code)
			}
			if !tt.ok {
				// Either recover with a warning naming the pin, or fail
				// with one line naming it (and so what to remove).
				const pinPath = "/sys/fs/bpf/spanprof/task_trace_context"
				errLine := ""
				for _, l := range strings.Split(text, "\n") {
					if strings.HasPrefix(l, "spanprof record: ") {
						errLine = l
					}
				}
				clear := (code == "0" && strings.Contains(text, pinPath)) || (code == "1" && strings.Contains(errLine, pinPath))
				if code != "0" && code != "1" {
					t.Fatalf("exit %s", code)
				}
				if code == "1" && errLine == "" {
					t.Fatalf("exit 1 without a one-line error:\n%s", text)
				}
				if !clear {
					// spanprof must either run (warning with the path and
					// what to do) or fail with a line naming the path.
					t.Errorf("an incompatible map at %s is neither recovered from nor named: %q", pinPath, errLine)
				}
			}
			if tt.want != "" && !strings.Contains(text, tt.want) {
				t.Errorf("output does not mention %q", tt.want)
			}
		})
	}
}

// TestReliabilityPinHelper runs inside the private mount namespace: it
// mounts a fresh bpffs, sets up the fault and runs spanprof record.
func TestReliabilityPinHelper(t *testing.T) {
	fault := os.Getenv(pinFaultEnv)
	if fault == "" {
		t.Skip("helper of TestReliabilityPinPathTaken")
	}
	if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount private bpffs: %v", err)
	}
	// A busy process, so that each recording has samples: a recording
	// of nothing is an error, which is not the fault under test.
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	dir := "/sys/fs/bpf/spanprof"
	pin := func(path string, spec *ebpf.MapSpec) {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatalf("create map: %v", err)
		}
		defer m.Close()
		if err := m.Pin(path); err != nil {
			t.Fatalf("pin %s: %v", path, err)
		}
	}
	hash := &ebpf.MapSpec{Name: "task_trace_context", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	switch fault {
	case "incompatible":
		os.MkdirAll(dir, 0o700)
		pin(filepath.Join(dir, "task_trace_context"), hash)
	case "dir-is-map":
		pin(dir, hash)
	case "stale-compatible":
		// A first run leaves the pin; the second must reuse it.
		if out, err := exec.Command(binPath, "record", "--duration", "300ms", "--frequency", "99").CombinedOutput(); err != nil {
			t.Fatalf("first run: %v\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "task_trace_context")); err != nil {
			t.Fatalf("first run left no pin: %v", err)
		}
	default:
		t.Fatalf("unknown fault %q", fault)
	}
	cmd := exec.Command(binPath, "record", "--duration", "300ms", "--frequency", "99", "--output", filepath.Join(t.TempDir(), "p.folded"))
	out, err := cmd.CombinedOutput()
	fmt.Printf("%s", out)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SPANPROF-EXIT %d\n", code)
}
