package reliability

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
)

// TestReliabilityPIDReusedByFork: a process exits and a fork that never
// execs takes its pid (a bash subshell, given the pid through
// /proc/sys/kernel/ns_last_pid). No exec event marks the second process,
// so its samples must still be symbolized against its own image (bash),
// not the exited one's (churn-child), and the first process's samples
// against churn-child.
func TestReliabilityPIDReusedByFork(t *testing.T) {
	testutil.RequireRoot(t)
	child := filepath.Join(fixtures, "churn-child")
	// The first process spins for a second and exits; then subshells are
	// forked with ns_last_pid set to take its pid, until one does, and that
	// one spins for a second in bash.
	script := fmt.Sprintf(`
%s 1000000 &
a=$!
wait $a
for i in $(seq 50); do
	echo $((a - 1)) > /proc/sys/kernel/ns_last_pid
	( if [ "$BASHPID" = "$a" ]; then end=$((SECONDS + 2)); while [ $SECONDS -lt $end ]; do :; done; exit 7; fi; exit 0 )
	if [ $? = 7 ]; then echo "reused $a"; exit 0; fi
done
echo "pid $a not reused"
`, child)
	out := filepath.Join(t.TempDir(), "reuse.pb.gz")
	rec := startSpanprof(t, "recording", "record", "--all", "--frequency", "999", "--duration", "5s", "--output", out)
	res, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, res)
	}
	rec.wait(t)
	var pid string
	if _, err := fmt.Sscanf(string(res), "reused %s", &pid); err != nil {
		t.Skipf("the pid was not reused (another process took it first): %s", res)
	}
	if !strings.Contains(rec.stderr.String(), "pids were taken by a fork") {
		t.Errorf("record did not report a pid taken by a fork:\n%s", rec.stderr)
	}
	// The leaf (first user location) of each of the pid's samples: which
	// file's mapping holds it, per thread name.
	leafIn := map[string]map[string]int64{}
	for _, s := range readPprof(t, out).Sample {
		if label(s, "pid") != pid {
			continue
		}
		name := label(s, "thread.name")
		for _, loc := range s.Location {
			if loc.Address >= 1<<63 {
				continue // kernel
			}
			file := "(no mapping)"
			if loc.Mapping != nil {
				file = filepath.Base(loc.Mapping.File)
			}
			if leafIn[name] == nil {
				leafIn[name] = map[string]int64{}
			}
			leafIn[name][file] += s.Value[0]
			break
		}
	}
	t.Logf("pid %s: user leaf by thread name and file: %v", pid, leafIn)
	total := func(m map[string]int64) (n int64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	in := func(m map[string]int64, files ...string) (n int64) {
		for _, f := range files {
			n += m[f]
		}
		return n
	}
	// Each process spins in its own code, and in libc and the vDSO for the
	// clock; the bash subshell in bash itself for about half its samples.
	first, second := leafIn["churn-child"], leafIn["bash"]
	if n := total(first); n < 100 || in(first, "churn-child", "libc.so.6", "[vdso]") < n*9/10 || in(first, "churn-child") < n/2 {
		t.Errorf("first process: %d samples, leaves %v; want 100 or more, nine in ten in churn-child, libc or the vDSO, half in churn-child", n, first)
	}
	if n := total(second); n < 100 || in(second, "bash", "libc.so.6", "[vdso]") < n*9/10 || in(second, "bash") < n/4 {
		t.Errorf("the fork that took its pid: %d samples, leaves %v; want 100 or more, nine in ten in bash, libc or the vDSO, a quarter in bash", n, second)
	}
}
