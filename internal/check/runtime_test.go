package check

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

// startRuntime starts a real runtime process and waits until it runs its
// own executable and its maps show lib (the runtime is loaded), so that
// check sees what it would see in production. (Between fork and exec the
// child's /proc files are this test's.)
func startRuntime(t *testing.T, lib string, env []string, name string, args ...string) int {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("no %s on PATH", name)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	// node's --perf-basic-prof also writes a V8 log into its working
	// directory: keep it out of the source tree.
	cmd.Dir = t.TempDir()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.Remove("/tmp/perf-" + strconv.Itoa(pid) + ".map") // node --perf-basic-prof writes one
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps"); err == nil && exe != "" && exe != self && bytes.Contains(b, []byte(lib)) {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not load %s", name, lib)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRuntimeFlagsLive checks real JVM, Node.js and Python processes with
// and without their profiling flags, in every output format.
func TestRuntimeFlagsLive(t *testing.T) {
	testutil.RequireLong(t, "starts JVMs, Node and CPython")
	dir := t.TempDir()
	sleepJava := filepath.Join(dir, "Sleep.java")
	if err := os.WriteFile(sleepJava, []byte("public class Sleep { public static void main(String[] a) throws Exception { Thread.sleep(60000); } }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const nodeSleep = "setTimeout(() => {}, 60000)"
	const pySleep = "import time; time.sleep(60)"
	tests := []struct {
		name    string
		lib     string // what the maps show once the runtime is up
		env     []string
		cmd     string
		args    []string
		rule    string
		flagged bool
	}{
		{"java without flag", "libjvm.so", nil, "java", []string{sleepJava}, "jvm-no-preserve-frame-pointer", true},
		{"java -XX:+PreserveFramePointer", "libjvm.so", nil, "java", []string{"-XX:+PreserveFramePointer", sleepJava}, "jvm-no-preserve-frame-pointer", false},
		{"java flag in JAVA_TOOL_OPTIONS", "libjvm.so", []string{"JAVA_TOOL_OPTIONS=-XX:+PreserveFramePointer"}, "java", []string{sleepJava}, "jvm-no-preserve-frame-pointer", false},
		{"node without flags", "node", nil, "node", []string{"-e", nodeSleep}, "node-no-perf-flags", true},
		{"node --perf-basic-prof only", "node", nil, "node", []string{"--perf-basic-prof", "-e", nodeSleep}, "node-no-perf-flags", true},
		{"node with both flags", "node", nil, "node", []string{"--perf-basic-prof", "--interpreted-frames-native-stack", "-e", nodeSleep}, "node-no-perf-flags", false},
		// The machine's Python is 3.11: it has no -X perf, with or
		// without the flag (3.11 accepts and ignores unknown -X options).
		{"python3.11", "python3.11", nil, "python3.11", []string{"-c", pySleep}, "python-no-perf-support", true},
		{"python3.11 -X perf", "python3.11", nil, "python3.11", []string{"-X", "perf", "-c", pySleep}, "python-no-perf-support", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := startRuntime(t, tt.lib, tt.env, tt.cmd, tt.args...)
			for _, format := range []string{"text", "json", "sarif"} {
				var out, errb bytes.Buffer
				code := Main([]string{"--format", format, strconv.Itoa(pid)}, &out, &errb)
				if code != 0 && code != 1 {
					t.Fatalf("%s: exit %d: %s", format, code, errb.String())
				}
				if got := reports(t, format, out.Bytes(), tt.rule); got != tt.flagged {
					t.Errorf("%s: %s in output = %v, want %v\n%s", format, tt.rule, got, tt.flagged, out.String())
				}
			}
		})
	}
}

// reports tells whether a check report in format names rule as a finding.
func reports(t *testing.T, format string, out []byte, rule string) bool {
	t.Helper()
	switch format {
	case "json":
		var rep JSONReport
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("json report: %v", err)
		}
		for _, f := range rep.Findings {
			if f.Rule == rule {
				return true
			}
		}
		return false
	case "sarif":
		var log sarifLog
		if err := json.Unmarshal(out, &log); err != nil {
			t.Fatalf("sarif report: %v", err)
		}
		for _, r := range log.Runs {
			for _, res := range r.Results {
				if res.RuleID == rule {
					return true
				}
			}
		}
		return false
	}
	return strings.Contains(string(out), rule)
}
