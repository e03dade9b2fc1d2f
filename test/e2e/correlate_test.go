package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// truthSpan is one span the workload ran, as it recorded it.
type truthSpan struct {
	tid         int
	trace, span string
	// start..end encloses the time the thread carried the span's ids;
	// held..released lies inside that time. Workloads that record one
	// window give both the same.
	start, end     uint64
	held, released uint64
	function       string
}

func readTruth(t *testing.T, path string) map[int][]truthSpan {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int][]truthSpan{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		if len(p) == 9 {
			// The Go service leads with the goroutine id and ends with
			// its inner window.
			p = p[1:]
		}
		if len(p) != 6 && len(p) != 8 {
			t.Fatalf("bad truth line %q", sc.Text())
		}
		tid, _ := strconv.Atoi(p[0])
		start, _ := strconv.ParseUint(p[3], 10, 64)
		end, _ := strconv.ParseUint(p[4], 10, 64)
		held, released := start, end
		if len(p) == 8 {
			held, _ = strconv.ParseUint(p[6], 10, 64)
			released, _ = strconv.ParseUint(p[7], 10, 64)
		}
		out[tid] = append(out[tid], truthSpan{tid, p[1], p[2], start, end, held, released, p[5]})
	}
	return out
}

// correlation is what the acceptance criteria measure.
type correlation struct {
	inSpan, inSpanRight     int // samples well inside a span window; those with its ids
	linked, linkedRight     int // samples with a link; those whose link is the span at that time
	linkedOutside           int // linked samples outside their span's window by more than 50µs
	functionRight, checkedF int
	// Time ranges of the samples and of the spans, to tell a recording
	// that missed the workload from one that missed its spans' ids.
	samplesFrom, samplesTo, spansFrom, spansTo uint64
}

// ranges describes the sampled and the span time ranges, relative to the
// first span's start.
func (c correlation) ranges() string {
	rel := func(ts uint64) string { return time.Duration(int64(ts - c.spansFrom)).String() }
	if c.samplesTo == 0 {
		return fmt.Sprintf("no samples; spans over %s", rel(c.spansTo))
	}
	return fmt.Sprintf("samples from %s to %s, spans from 0s to %s", rel(c.samplesFrom), rel(c.samplesTo), rel(c.spansTo))
}

// measureCorrelation compares samples with the ground truth. A sample is
// in a span when it lies in the span's inner window (held..released), 50µs
// clear of its ends; a linked sample is right when it lies in its span's
// outer window (start..end) within 50µs. Spans that began before the first
// sample are left out: a writer that publishes through the uprobe hook told
// the kernel about them before spanprof was listening.
func measureCorrelation(samples []otlpSample, truth map[int][]truthSpan) correlation {
	const margin = uint64(50 * time.Microsecond)
	var c correlation
	first := uint64(1<<64 - 1)
	for _, s := range samples {
		for _, ts := range s.times {
			first = min(first, ts)
			c.samplesTo = max(c.samplesTo, ts)
		}
	}
	c.samplesFrom, c.spansFrom = first, 1<<64-1
	for _, spans := range truth {
		for _, sp := range spans {
			c.spansFrom, c.spansTo = min(c.spansFrom, sp.start), max(c.spansTo, sp.end)
		}
	}
	for _, s := range samples {
		tid, _ := strconv.Atoi(s.attrs["thread.id"])
		spans := truth[tid]
		for _, ts := range s.times {
			// The span whose inner window holds the sample, 50µs clear
			// of its ends.
			var at *truthSpan
			for i := range spans {
				if ts >= spans[i].held+margin && ts+margin <= spans[i].released {
					at = &spans[i]
					break
				}
			}
			if at != nil && at.start > first {
				c.inSpan++
				if s.trace == at.trace && s.span == at.span {
					c.inSpanRight++
				} else if debugCorrelation {
					fmt.Printf("miss: tid %d +%dus from start, -%dus to end, link %q, frames %v\n", tid, (ts-at.start)/1000, (at.end-ts)/1000, s.span, s.frames)
				}
				c.checkedF++
				if len(s.frames) > 0 && containsFrame(s.frames, at.function) {
					c.functionRight++
				} else if debugCorrelation {
					fmt.Printf("function miss: want %s, frames %v\n", at.function, s.frames)
				}
			}
			if s.trace != "" {
				c.linked++
				// Right: the thread was in the linked span at that time,
				// within the 50µs the windows are measured to (at a
				// boundary two consecutive spans both qualify).
				for i := range spans {
					sp := &spans[i]
					if sp.trace == s.trace && sp.span == s.span && ts+margin >= sp.start && ts <= sp.end+margin {
						c.linkedRight++
						break
					}
				}
				var own *truthSpan
				for i := range spans {
					if spans[i].trace == s.trace && spans[i].span == s.span {
						own = &spans[i]
					}
				}
				if own == nil || ts+margin < own.start || ts > own.end+margin {
					c.linkedOutside++
				}
			}
		}
	}
	return c
}

var debugCorrelation = os.Getenv("SPANPROF_DEBUG_CORRELATION") != ""

func containsFrame(frames []string, fn string) bool {
	for _, f := range frames {
		if f == fn || strings.HasSuffix(f, "."+fn) { // Go names are package-qualified
			return true
		}
	}
	return false
}

func TestCorrelationNative(t *testing.T) {
	requireRoot(t)
	bin := filepath.Join(repoRoot, "testdata", "tracectx", "build")
	for _, variant := range []string{"workload-gcc", "workload-clang", "workload-lib", "workload-hook"} {
		t.Run(variant, func(t *testing.T) {
			dir := t.TempDir()
			truthPath := filepath.Join(dir, "truth")
			// The workload runs until told to stop, so a slow start of
			// spanprof on a loaded machine cannot outlast it.
			fix := startProgram(t, filepath.Join(bin, variant), truthPath, "120", "4")
			out := filepath.Join(dir, "p.otlp.json")
			spanprof(t, "record", "--pid", fmt.Sprint(fix.Process.Pid), "--frequency", "999", "--duration", "3s", "--output", out)
			fix.Process.Signal(syscall.SIGTERM) // it writes its ground truth and exits
			if err := fix.Wait(); err != nil {
				t.Fatalf("workload: %v", err)
			}
			truth := readTruth(t, truthPath)
			c := measureCorrelation(readOTLP(t, out), truth)
			t.Logf("%s: in-span samples %d, with the right ids %d (%.3f%%); linked %d, right %d (%.3f%%); linked outside their window ±50µs: %d; span function on stack %d/%d",
				variant, c.inSpan, c.inSpanRight, pct(c.inSpanRight, c.inSpan), c.linked, c.linkedRight, pct(c.linkedRight, c.linked),
				c.linkedOutside, c.functionRight, c.checkedF)
			if c.inSpan < 300 {
				t.Fatalf("only %d samples inside span windows (%s)", c.inSpan, c.ranges())
			}
			if pct(c.inSpanRight, c.inSpan) < 99.5 {
				t.Errorf("%.3f%% of in-span samples carry the span's ids, want ≥ 99.5%%", pct(c.inSpanRight, c.inSpan))
			}
			if pct(c.linkedRight, c.linked) < 99.9 {
				t.Errorf("%.3f%% of linked samples are right, want ≥ 99.9%%", pct(c.linkedRight, c.linked))
			}
			// Samples inside libc's clock_gettime lose the span's function:
			// libc has no frame pointers and the frame is not the leaf.
			if pct(c.functionRight, c.checkedF) < 95 {
				t.Errorf("span function on the stack in %.2f%% of in-span samples, want ≥ 95%%", pct(c.functionRight, c.checkedF))
			}
			if c.linkedOutside > 0 {
				t.Errorf("%d linked samples lie outside their span window by more than 50µs", c.linkedOutside)
			}
		})
	}
}

// TestCorrelationGo runs the SDK-instrumented Go service (goroutine labels)
// built normally and stripped.
func TestCorrelationGo(t *testing.T) {
	requireRoot(t)
	src := filepath.Join(repoRoot, "testdata", "golabels", "service")
	for _, v := range []struct{ name, ldflags string }{{"plain", ""}, {"stripped", "-s -w"}} {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "service")
			build := exec.Command("go", "build", "-ldflags="+v.ldflags, "-o", bin, ".")
			build.Dir = src
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build service: %v\n%s", err, out)
			}
			truthPath := filepath.Join(dir, "truth")
			// The service runs until told to stop, so a slow start of
			// spanprof on a loaded machine cannot outlast it (a fixed
			// 12 s did: the recording then held no sample of a span).
			fix := startProgram(t, bin, "-duration", "120s", "-out", truthPath, "-gomaxprocs", "2")
			out := filepath.Join(dir, "p.otlp.json")
			spanprof(t, "record", "--pid", fmt.Sprint(fix.Process.Pid), "--frequency", "999", "--duration", "3s", "--output", out)
			fix.Process.Signal(syscall.SIGTERM) // it writes its ground truth and exits
			if err := fix.Wait(); err != nil {
				t.Fatalf("service: %v", err)
			}
			c := measureCorrelation(readOTLP(t, out), readTruth(t, truthPath))
			t.Logf("go %s: in-span samples %d, with the right ids %d (%.3f%%); linked %d, right %d (%.3f%%); linked outside their window ±50µs: %d; span function on stack %d/%d",
				v.name, c.inSpan, c.inSpanRight, pct(c.inSpanRight, c.inSpan), c.linked, c.linkedRight, pct(c.linkedRight, c.linked),
				c.linkedOutside, c.functionRight, c.checkedF)
			if c.inSpan < 300 {
				t.Fatalf("only %d samples inside span windows (%s)", c.inSpan, c.ranges())
			}
			if pct(c.inSpanRight, c.inSpan) < 99.5 {
				t.Errorf("%.3f%% of in-span samples carry the span's ids, want ≥ 99.5%%", pct(c.inSpanRight, c.inSpan))
			}
			if pct(c.linkedRight, c.linked) < 99.9 {
				t.Errorf("%.3f%% of linked samples are right, want ≥ 99.9%%", pct(c.linkedRight, c.linked))
			}
			if pct(c.functionRight, c.checkedF) < 95 {
				t.Errorf("span function on the stack in %.2f%% of in-span samples, want ≥ 95%%", pct(c.functionRight, c.checkedF))
			}
		})
	}
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
