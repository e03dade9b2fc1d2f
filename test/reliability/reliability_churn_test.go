package reliability

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReliabilityProcessChurn runs `record --all` while 1,000 short-lived
// processes a second are spawned (20 s, a minute with
// SPANPROF_RELIABILITY_LONG). spanprof must keep up (no crash, losses
// counted), keep its memory and open files bounded, and symbolize the
// samples of children that exited long before the profile was built.
func TestReliabilityProcessChurn(t *testing.T) {
	requireRoot(t)
	secs := 20
	if long() {
		secs = 60
	}
	out := filepath.Join(t.TempDir(), "churn.pb.gz")
	rec := startSpanprof(t, "recording", "record", "--all", "--frequency", "999",
		"--duration", fmt.Sprintf("%ds", secs+3), "--output", out)
	pid := rec.cmd.Process.Pid

	churn := exec.Command(filepath.Join(fixtures, "churn"), filepath.Join(fixtures, "churn-child"),
		"1000", fmt.Sprint(secs), "300")
	stdout, _ := churn.StdoutPipe()
	if err := churn.Start(); err != nil {
		t.Fatal(err)
	}
	// Watch spanprof's RSS and open files while the churn runs.
	var maxFDs int
	var rssSeries []int64
	tick := time.NewTicker(time.Second)
	churnDone := make(chan string, 1)
	go func() {
		var last string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			last = sc.Text()
		}
		churn.Wait()
		churnDone <- last
	}()
	var summary string
watch:
	for {
		select {
		case summary = <-churnDone:
			break watch
		case <-tick.C:
			maxFDs = max(maxFDs, openFDs(pid))
			if rss, err := procStatus(pid, "VmRSS"); err == nil {
				rssSeries = append(rssSeries, rss)
			}
		}
	}
	tick.Stop()
	hwm := rec.wait(t)
	t.Logf("churn: %s", summary)
	t.Logf("spanprof: peak RSS %d MiB, RSS by second (MiB) %v, open files max %d", hwm/1024, mib(rssSeries), maxFDs)
	t.Logf("spanprof stderr:\n%s", rec.stderr)

	p := readPprof(t, out)
	var childSamples, childNamed, total int64
	for _, s := range p.Sample {
		total += s.Value[0]
		if label(s, "thread.name") != "churn-child" {
			continue
		}
		childSamples += s.Value[0]
		for _, loc := range s.Location {
			named := false
			for _, ln := range loc.Line {
				if strings.HasPrefix(ln.Function.Name, "churn_child_") {
					named = true
				}
			}
			if named {
				childNamed += s.Value[0]
				break
			}
		}
	}
	t.Logf("samples %d, of short-lived children %d, with the child's function names %d (%.1f%%), lost %v",
		total, childSamples, childNamed, pct(childNamed, childSamples), lostComments(p))
	if childSamples == 0 {
		t.Fatal("no samples of the short-lived children")
	}
	// Memory: 20,000-60,000 processes must not cost more than a bounded
	// amount; the mappings of a process are a few hundred bytes.
	if hwm > 512*1024 {
		t.Errorf("peak RSS %d MiB under churn, want < 512 MiB", hwm/1024)
	}
	if maxFDs > 4096 {
		t.Errorf("%d open files under churn: files of exited processes are kept per process, not per file", maxFDs)
	}
	// Known gap (docs/reliability.md): the exec event reaches user space
	// up to the reader's 50 ms poll later, when a child living 1 ms is
	// gone, so /proc/PID/maps cannot be read and its samples keep
	// addresses only. Until the exec path reads mappings promptly, the
	// fraction is reported, and enforced with SPANPROF_RELIABILITY_STRICT.
	if got := pct(childNamed, childSamples); got < 90 {
		msg := fmt.Sprintf("only %.1f%% of the short-lived children's samples carry their function names (want >= 90%%)", got)
		if os.Getenv("SPANPROF_RELIABILITY_STRICT") != "" {
			t.Error(msg)
		} else {
			t.Log("KNOWN GAP: " + msg)
		}
	}
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func mib(kib []int64) []int64 {
	out := make([]int64, len(kib))
	for i, v := range kib {
		out[i] = v / 1024
	}
	return out
}
