package kernels

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/test/truth"
)

// Frequencies of guest.sh (FREQ, CORR_FREQ).
const (
	freq = 99
)

// busyWindows reads the busy windows a chain fixture wrote down, as
// [start, end] Unix nanoseconds.
func busyWindows(path string) ([][2]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ws [][2]int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		if len(p) != 2 {
			return nil, fmt.Errorf("bad mark %q in %s", sc.Text(), path)
		}
		a, _ := strconv.ParseInt(p[0], 10, 64)
		b, _ := strconv.ParseInt(p[1], 10, 64)
		ws = append(ws, [2]int64{a, b})
	}
	return ws, sc.Err()
}

// busyNanos adds up the busy windows.
func busyNanos(ws [][2]int64) int64 {
	var sum int64
	for _, w := range ws {
		sum += w[1] - w[0]
	}
	return sum
}

// stackTally counts the on-CPU samples of a pid and those whose stack
// reaches main: all of them, and those taken inside the fixture's busy
// windows, where the fixture's own clock says it runs the chain below main.
// Outside them a process may truly be elsewhere: in the dynamic loader
// before main (under TCG an arm64 loader's start-up is several percent of
// a 3 s run), in exec or exit, or in libc between windows. So the bar is
// judged inside the windows, and the share of all samples is logged.
type stackTally struct{ samples, main, inWindow, inWindowMain int }

func tallyPID(samples []truth.Sample, pid int, windows [][2]int64) stackTally {
	var s stackTally
	for _, x := range samples {
		if x.Kind != "samples" || x.PID != int64(pid) {
			continue
		}
		n := len(x.Times)
		toMain := truth.ContainsFrame(x.Frames, "main")
		s.samples += n
		if toMain {
			s.main += n
		}
		for _, t := range x.Times {
			if inWindows(windows, int64(t)) {
				s.inWindow++
				if toMain {
					s.inWindowMain++
				}
			}
		}
	}
	return s
}

func inWindows(ws [][2]int64, t int64) bool {
	for _, w := range ws {
		if t >= w[0] && t <= w[1] {
			return true
		}
	}
	return false
}

// mainShare is the share of the samples inside the busy windows whose
// stack reaches main; allShare that of every sample.
func (s stackTally) mainShare() float64 { return truth.Pct(s.inWindowMain, s.inWindow) / 100 }
func (s stackTally) allShare() float64  { return truth.Pct(s.main, s.samples) / 100 }

// okMain: enough samples inside the windows to judge, ≥ 99 % of them
// reaching main.
func (s stackTally) okMain() bool { return s.inWindow >= s.samples/2 && s.mainShare() >= 0.99 }

func (s stackTally) String() string {
	return fmt.Sprintf("to main %.2f%% of %d in busy windows (%.2f%% of all)", 100*s.mainShare(), s.inWindow, 100*s.allShare())
}

// checkInsns logs how many instructions the verifier processed for each
// program on this kernel (guest.sh insns) and fails a program past its
// budget in bpf/verified-insns.txt, or one without a budget.
func checkInsns(t *testing.T, label string, c *console, add func(string, ...any)) {
	r := c.results["insns"]
	if r == nil {
		return // "did not report"
	}
	if r["rc"] != "0" {
		out, _ := os.ReadFile(c.path("insns.out"))
		t.Errorf("%s: loading the programs to count their instructions failed (rc %s): %s", label, r["rc"], out)
		return
	}
	if r["reported"] != "1" {
		add("verified instructions not reported by this kernel")
		return
	}
	budget, err := testutil.ReadBudget(filepath.Join(repoRoot, "bpf", "verified-insns.txt"))
	if err != nil {
		t.Errorf("%s: %v", label, err)
		return
	}
	goarch := map[string]string{"x86_64": "amd64", "aarch64": "arm64"}[c.result("start", "arch")]
	held := false
	for k := range budget {
		held = held || goarch != "" && strings.HasPrefix(k, goarch+"/")
	}
	var counts []string
	for _, name := range slices.Sorted(maps.Keys(r)) {
		if name == "rc" || name == "reported" {
			continue
		}
		n, b := atoi(r[name]), budget[goarch+"/"+name]
		counts = append(counts, fmt.Sprintf("%s %d", name, n))
		switch _, has := budget[goarch+"/"+name]; {
		case !held:
			// An architecture without budgets is logged only.
		case !has:
			t.Errorf("%s: program %s has no budget in bpf/verified-insns.txt", label, name)
		case int64(n) > b:
			t.Errorf("%s: the verifier processed %d instructions of %s, past its budget of %d (bpf/verified-insns.txt)", label, n, name, b)
		}
	}
	if !held {
		add("verified instructions (no %s budgets: logged only): %s", goarch, strings.Join(counts, ", "))
		return
	}
	add("verified instructions: %s", strings.Join(counts, ", "))
}

// check scores one kernel's run and logs its figures in one line.
func check(t *testing.T, label string, c *console, elapsed time.Duration) {
	var line []string
	add := func(f string, a ...any) { line = append(line, fmt.Sprintf(f, a...)) }
	defer func() { t.Logf("%s: %s; %v", label, strings.Join(line, "; "), elapsed.Round(time.Second)) }()

	for _, err := range c.errs {
		t.Errorf("%s: %v", label, err)
	}
	checkStuck(t, label, c)
	for _, step := range []string{"patching", "insns", "helpers", "oncpu", "correlation", "gocorrelation", "offcpu", "exec", "agent"} {
		if c.results[step] == nil {
			t.Errorf("%s: step %s did not report", label, step)
		}
	}
	if r := c.results["patching"]; r != nil {
		add("sched_switch attached and detached %s times in %s s (%s attaches whose program never ran)", r["flips"], r["s"], r["silent"])
		if r["runs"] != "1" {
			add("%s/%s runs of the loop passed in %s s", r["passed"], r["runs"], r["total_s"])
		}
		if r["rc"] != "0" {
			out, _ := os.ReadFile(c.path("flip.out"))
			t.Errorf("%s: attaching and detaching a program on sched_switch failed (rc %s): %s", label, r["rc"], out)
		}
	}
	checkInsns(t, label, c, add)
	if r := c.results["helpers"]; r != nil {
		add("BPF helper tests: %s passed, %s failed, %s skipped", r["passed"], r["failed"], r["skipped"])
		if r["rc"] != "0" || r["failed"] != "0" || r["passed"] == "0" && r["skipped"] == "0" {
			out, _ := os.ReadFile(c.path("helpers.out"))
			t.Errorf("%s: the BPF helper tests failed in the kernel (rc %s):\n%s", label, r["rc"], out)
		}
	}
	loaded := c.result("oncpu", "loaded") == "1" && c.result("offcpu", "loaded") == "1" &&
		c.result("exec", "loaded") == "1" && c.result("agent", "loaded") == "1" && c.result("correlation", "rc") == "0" &&
		c.result("gocorrelation", "rc") == "0"
	add("loaded %v (load %ss)", loaded, c.result("oncpu", "load_s"))
	if !loaded {
		for _, l := range []string{"oncpu.log", "corr.log", "gocorr.log", "offcpu.log", "exec.log", "agent.log"} {
			if b, err := os.ReadFile(c.path(l)); err == nil {
				t.Logf("%s:\n%s", l, firstLines(string(b), 30))
			}
		}
		t.Errorf("%s: the programs did not load everywhere", label)
		return
	}
	if b, err := os.ReadFile(c.path("oncpu.log")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "WARN") || strings.Contains(l, "level=WARN") {
				t.Logf("%s record: %s", label, l)
			}
		}
	}
	checkOnCPU(t, label, c, add)
	checkCorrelation(t, label, c, add, "gcc", "truth-corr", "corr.otlp.json")
	checkAttributes(t, label, c, add, "gcc", "corr.otlp.json")
	if c.result("correlation", "late") == "1" {
		checkLateLoad(t, label, c, add)
	}
	if c.result("dtvcorrelation", "skipped") != "1" {
		if c.result("dtvcorrelation", "rc") != "0" {
			t.Errorf("%s: the dynamic-TLS correlation step failed (rc %q)", label, c.result("dtvcorrelation", "rc"))
		} else {
			checkCorrelation(t, label, c, add, "dlopen DTV", "truth-dtv", "dtv.otlp.json")
			checkAttributes(t, label, c, add, "dlopen DTV", "dtv.otlp.json")
		}
	}
	checkCorrelation(t, label, c, add, "go", "truth-go", "gocorr.otlp.json")
	checkOffCPU(t, label, c, add)
	checkExec(t, label, c, add)
	checkAgent(t, label, c, add)
	checkUnwind(t, label, c, add)
}

// checkUnwind scores guest.sh's unwind step, run where the payload has
// the fixture (unwindArches), as the host's e2e test
// (TestUnwindThroughLibraries) scores the same fixture, with
// truth.JudgeCases: every case's function and start_thread on ≥ 99 % of
// its thread's on-CPU samples and off-CPU time, for each compiler. The
// guest has no perf: c-join's on-CPU samples, judged against perf on the
// host, are logged only.
func checkUnwind(t *testing.T, label string, c *console, add func(string, ...any)) {
	r := c.results["unwind"]
	if r == nil {
		steps := strings.Fields(os.Getenv("SPANPROF_KERNEL_STEPS"))
		if unwindArches[c.result("start", "arch")] && (len(steps) == 0 || slices.Contains(steps, "unwind")) {
			t.Errorf("%s: step unwind did not report", label)
		}
		return
	}
	if r["skipped"] == "1" {
		return
	}
	log, _ := os.ReadFile(c.path("unwind.log"))
	if r["loaded"] != "1" || r["rc"] != "0" || r["alive"] != "1" {
		t.Errorf("%s: the unwinding step failed (loaded %s, rc %s, fixtures alive to the end %s): %s", label, r["loaded"], r["rc"], r["alive"], firstLines(string(log), 30))
		return
	}
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "lost") || strings.Contains(l, "stacks cut") || strings.Contains(l, "WARN") {
			t.Logf("%s unwind record: %s", label, l)
		}
	}
	samples := readSamples(t, c, "unwind.otlp.json")
	cuts := truth.WindowCuts(string(log))
	for _, cc := range []string{"gcc", "clang"} {
		byTID, err := truth.ReadCaseThreads(c.path("threads-" + cc))
		if err != nil {
			t.Errorf("%s: %v", label, err)
			continue
		}
		// One recording of both: its window cuts are judged against each
		// compiler's samples, the stricter bound.
		table, failures := truth.JudgeCases(label+" "+cc, truth.TallyCasesTo(samples, byTID, threadEntry), nil, cuts)
		t.Logf("%s: unwinding, %s build:\n%s", label, cc, table)
		for _, f := range failures {
			t.Errorf("%s: unwinding, %s build: %s", label, cc, f)
		}
		add("unwind %s: %d of %d cases judged failed", cc, len(failures), len(truth.UnwindCases))
	}
}

// threadEntry tells a stack that reaches a thread's entry in the guest:
// start_thread by name, or, since the cross toolchain's glibc the guest
// runs (libc6-arm64-cross) has no symbol table and names none of its own
// functions, the fixture's thread function (start_case, which
// pthread_create was given) with exactly two frames of libc.so.6 under
// it: start_thread's and clone3's child side.
func threadEntry(frames []string) bool {
	if truth.HasFunc(frames, truth.ThreadEntry) {
		return true
	}
	const libc = "libc.so.6+0x"
	n := len(frames)
	return n >= 3 && frames[n-3] == "start_case" && strings.HasPrefix(frames[n-2], libc) && strings.HasPrefix(frames[n-1], libc)
}

// unwindArches are the guest architectures whose payload has the
// unwinding fixture (payload_test.go, unwindFixtures).
var unwindArches = map[string]bool{"aarch64": true}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n")
}

func readSamples(t *testing.T, c *console, name string) []truth.Sample {
	t.Helper()
	s, err := truth.ReadOTLP(c.path(name))
	if err != nil {
		t.Errorf("%v", err)
	}
	return s
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func atof(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }

func checkOnCPU(t *testing.T, label string, c *console, add func(string, ...any)) {
	samples := readSamples(t, c, "oncpu.otlp.json")
	for _, cc := range []string{"gcc", "clang"} {
		ws, err := busyWindows(c.path("marks-" + cc))
		busy := busyNanos(ws)
		if err != nil {
			t.Errorf("%s: %v", label, err)
			continue
		}
		cpu := atof(c.result("oncpu", "cpu_"+cc))
		want := float64(freq) * cpu
		s := tallyPID(samples, atoi(c.result("oncpu", cc)), ws)
		add("%s samples %d/%.0f (%.1f%%; busy %.2fs, cpu %.2fs), %v", cc, s.samples, want, 100*float64(s.samples)/want,
			float64(busy)/1e9, cpu, s)
		if cpu < 0.5*float64(busy)/1e9 {
			t.Errorf("%s: chain-%s got %.2fs of CPU in %v of busy windows: too little to judge", label, cc, cpu, time.Duration(busy))
		}
		if float64(s.samples) < 0.9*want {
			t.Errorf("%s: chain-%s: %d samples, want ≥ 90%% of %.0f (%d Hz over %.2fs of CPU)", label, cc, s.samples, want, freq, cpu)
		}
		if !s.okMain() {
			t.Errorf("%s: chain-%s: %v, want ≥ 99%% in windows holding ≥ half the samples", label, cc, s)
		}
	}
}

// checkCorrelation scores one correlation step: the gcc workload (TLS in
// the executable) or the Go service (goroutine labels).
func checkCorrelation(t *testing.T, label string, c *console, add func(string, ...any), what, truthFile, otlp string) {
	spans, err := truth.ReadSpans(c.path(truthFile))
	if err != nil {
		t.Errorf("%s: %v", label, err)
		return
	}
	samples := readSamples(t, c, otlp)
	r := truth.MeasureCorrelation(samples, spans)
	add("%s correlation precision %.4f recall %.4f (%d in span)", what, r.Precision(), r.Recall(), r.InSpan)
	if r.LinkedUnlocked > 0 {
		add("%s: %d links right on a thread the goroutine had not yet locked", what, r.LinkedUnlocked)
	}
	if r.InSpan < 300 {
		t.Errorf("%s: %s: only %d samples inside span windows (%s)", label, what, r.InSpan, r.Ranges())
	}
	if r.Precision() < 0.999 || r.Recall() < 0.99 {
		t.Errorf("%s: %s correlation precision %.4f (want ≥ 0.999), recall %.4f (want ≥ 0.99); links not right: %s",
			label, what, r.Precision(), r.Recall(), truth.DescribeWrong(samples, spans, 10))
	}
}

// checkLateLoad checks that the correlation step's late dlopen came as
// link-map events from the dynamic loader's hook (record's closing line
// counts them), so the uprobe attached and fired on this kernel.
func checkLateLoad(t *testing.T, label string, c *console, add func(string, ...any)) {
	b, err := os.ReadFile(c.path("corr.log"))
	if err != nil {
		t.Errorf("%s: %v", label, err)
		return
	}
	const seen = " library loads or unloads seen"
	n := -1
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "libraries loaded late are not seen") {
			t.Errorf("%s: the dynamic loader's hook could not be watched: %s", label, l)
		}
		if rest, ok := strings.CutPrefix(l, "spanprof: trace context: "); ok && strings.Contains(rest, seen) {
			n = atoi(rest[:strings.Index(rest, seen)])
		}
	}
	add("late dlopen: %d link-map events", max(n, 0))
	if n < 1 {
		t.Errorf("%s: the late dlopen of the correlation step came as no link-map event (record's log:\n%s)", label, firstLines(string(b), 30))
	}
}

// checkAttributes scores the thread-context attributes of a native
// workload's recording: its three attributes on every linked sample.
func checkAttributes(t *testing.T, label string, c *console, add func(string, ...any), what, otlp string) {
	a := truth.MeasureAttributes(readSamples(t, c, otlp))
	add("%s attributes on %.2f%% of %d linked samples (right %.2f%%)", what, truth.Pct(a.Present, a.Linked), a.Linked,
		truth.Pct(a.Right, a.Linked))
	if truth.Pct(a.Right, a.Linked) < 99.9 || a.Stray > 0 {
		t.Errorf("%s: %s: attributes right on %d of %d linked samples (want ≥ 99.9%%), on %d unlinked ones", label, what, a.Right, a.Linked, a.Stray)
	}
}

func checkOffCPU(t *testing.T, label string, c *console, add func(string, ...any)) {
	spans, err := truth.ReadOffCPU(c.path("truth-offcpu"))
	if err != nil {
		t.Errorf("%s: %v", label, err)
		return
	}
	o := truth.MeasureOffCPU(spans, readSamples(t, c, "offcpu.otlp.json"))
	sleep := o.Kinds["sleep"]
	if sleep == nil {
		t.Errorf("%s: the off-CPU fixture ran no sleeping span", label)
		return
	}
	// The bar is the sleeping spans' (one known wait each) whose thread
	// was not preempted in the sleep: a preempted one waited for a CPU in
	// state R after it woke, which is in its measured time but is not a
	// wait (docs/offcpu.md). An emulated guest preempts a few in ten; the
	// error over all sleeping spans is logged beside. The short pipe and
	// ping-pong waits are logged with the rest but judged by the host's
	// e2e test.
	sleepErr := float64(sleep.AttributedUnpreempted)/float64(sleep.TruthUnpreempted) - 1
	add("off-CPU sleep %+.1f%% over %d spans not preempted (%+.1f%% over all %d), all kinds %+.1f%% (%d spans)",
		100*sleepErr, sleep.Spans-sleep.Preempted, 100*(float64(sleep.Attributed)/float64(sleep.Truth)-1), sleep.Spans,
		100*o.Error(), len(spans))
	if len(spans) < 100 {
		t.Errorf("%s: only %d off-CPU spans ran", label, len(spans))
	}
	if 2*sleep.Preempted > sleep.Spans {
		t.Errorf("%s: %d of %d sleeping spans were preempted in their sleep: too few left to judge", label, sleep.Preempted, sleep.Spans)
	}
	if sleepErr < -0.1 || sleepErr > 0.1 {
		log, _ := os.ReadFile(c.path("offcpu.log"))
		t.Errorf("%s: off-CPU time of sleeping spans not preempted %+.1f%% off the real blocked time, want within ±10%% (the recording has %d off-CPU events linked to a span); its log:\n%s",
			label, 100*sleepErr, o.Events, firstLines(string(log), 30))
	}
	if o.WrongLink > 0 || o.WrongState > 0 {
		t.Errorf("%s: %d off-CPU samples link to no span of their thread, %d are in a state their stack does not explain (S, or D in a mutex or rwsem wait) %v", label, o.WrongLink, o.WrongState, o.WrongStates)
	}
}

func checkExec(t *testing.T, label string, c *console, add func(string, ...any)) {
	samples := readSamples(t, c, "exec.otlp.json")
	var sum stackTally
	children := 0
	for i, p := range strings.Split(c.result("exec", "pids"), ",") {
		ws, err := busyWindows(c.path(fmt.Sprintf("marks-exec-%d", i+1)))
		if err != nil {
			t.Errorf("%s: %v", label, err)
		}
		s := tallyPID(samples, atoi(p), ws)
		sum.samples += s.samples
		sum.main += s.main
		sum.inWindow += s.inWindow
		sum.inWindowMain += s.inWindowMain
		if s.samples > 0 {
			children++
		}
	}
	add("exec/exit %d/5 children sampled, %d samples named %v", children, sum.samples, sum)
	if children < 5 || !sum.okMain() {
		t.Errorf("%s: short-lived children: %d of 5 sampled, %v (want all 5, ≥ 99%%)", label, children, sum)
	}
}

func checkAgent(t *testing.T, label string, c *console, add func(string, ...any)) {
	var samples []truth.Sample
	requests := 0
	for _, f := range c.files {
		if strings.HasPrefix(f, "sink/") {
			requests++
			samples = append(samples, readSamples(t, c, f)...)
		}
	}
	want := float64(freq) * atof(c.result("agent", "cpu"))
	ws, err := busyWindows(c.path("marks-agent"))
	if err != nil {
		t.Errorf("%s: %v", label, err)
	}
	s := tallyPID(samples, atoi(c.result("agent", "pid")), ws)
	add("agent %d exports, %d/%.0f samples (%.1f%%), %v", requests, s.samples, want, 100*float64(s.samples)/want, s)
	if c.result("agent", "rc") != "0" {
		t.Errorf("%s: the agent exited with %s", label, c.result("agent", "rc"))
	}
	if float64(s.samples) < 0.9*want || !s.okMain() {
		t.Errorf("%s: the sink got %d samples of the fixture (want ≥ 90%% of %.0f), %v (want ≥ 99%%)", label, s.samples, want, s)
	}
}

// stepLogs are the logs of spanprof each step of guest.sh writes.
var stepLogs = map[string]string{
	"patching": "flip.out", "oncpu": "oncpu.log", "correlation": "corr.log", "dtvcorrelation": "dtv.log", "gocorrelation": "gocorr.log",
	"offcpu": "offcpu.log", "execexit": "exec.log", "agent": "agent.log", "unwind": "unwind.log",
}

// checkStuck fails each step the guest's watchdog had to stop, with what
// the workload's threads were doing then and spanprof's log, which holds
// its goroutines' stacks (SIGQUIT).
func checkStuck(t *testing.T, label string, c *console) {
	for _, step := range slices.Sorted(maps.Keys(stepLogs)) {
		r := c.results["stuck-"+step]
		if r == nil {
			continue
		}
		dump, _ := os.ReadFile(c.path("watchdog-" + step))
		log, _ := os.ReadFile(c.path(stepLogs[step]))
		t.Errorf("%s: step %s still ran after %s s and was stopped; its threads then:\n%s\n%s:\n%s",
			label, step, r["seconds"], dump, stepLogs[step], lastLines(string(log), 400))
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = append([]string{fmt.Sprintf("(%d lines before)", len(l)-n)}, l[len(l)-n:]...)
	}
	return strings.Join(l, "\n")
}
