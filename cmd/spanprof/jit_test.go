package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	gpprof "github.com/google/pprof/profile"

	"github.com/spanprof/spanprof/internal/jvm/jvmtest"
	"github.com/spanprof/spanprof/internal/testutil"
)

// TestRecordChild is the spanprof process the JIT tests run: record drops
// capabilities for good, which must not happen to the test process.
func TestRecordChild(t *testing.T) {
	args := os.Getenv("SPANPROF_RECORD_CHILD")
	if args == "" {
		t.Skip("run by the JIT tests as a child")
	}
	os.Exit(run(strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
}

func recordChild(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRecordChild$")
	cmd.Env = append(os.Environ(), "SPANPROF_RECORD_CHILD="+strings.Join(append([]string{"record"}, args...), "\x1f"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("spanprof record %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func needSampling(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t, "needs root to load eBPF programs and attach to other users' JVMs")
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("no java on PATH")
	}
}

// startJava runs Hot.java (internal/jvm/jvmtest) with frame pointers.
func startJava(t *testing.T, cred *syscall.Credential, dir string, args ...string) int {
	t.Helper()
	cmd := jvmtest.Start(t, jvmtest.Options{Dir: dir, Cred: cred, Flags: []string{"-XX:+PreserveFramePointer"}}, args...)
	pid := cmd.Process.Pid
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid)) })
	return pid
}

// workerShares reads a pprof profile and returns, over the samples of
// threads whose name starts with prefix, the share whose leaf is fn and
// the share that reaches the thread's entry (reachesThreadEntry), with the
// sample count.
func workerShares(t *testing.T, path, prefix, fn string) (named, entry float64, n int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := gpprof.Parse(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	roots := map[string]int{}
	misses := map[string]int{} // leaves of the samples that are not fn
	var hit, reach int
	for _, s := range p.Sample {
		if len(s.Label["thread.name"]) == 0 || !strings.HasPrefix(s.Label["thread.name"][0], prefix) || len(s.Location) == 0 {
			continue
		}
		c := int(s.Value[0])
		n += c
		if leaf := s.Location[0].Line; len(leaf) > 0 && leaf[len(leaf)-1].Function.Name == fn {
			hit += c
		} else if len(leaf) > 0 {
			misses[leaf[len(leaf)-1].Function.Name] += c
		} else {
			misses[fmt.Sprintf("%#x", s.Location[0].Address)] += c
		}
		root := s.Location[len(s.Location)-1].Line
		if len(root) > 0 {
			roots[root[0].Function.Name] += c
			if reachesThreadEntry(s.Location) {
				reach += c
			}
		}
	}
	if n == 0 {
		t.Fatalf("no samples of %s* threads in %s", prefix, path)
	}
	t.Logf("%s*: %d samples, %.1f%% in %s, %.1f%% reach the thread entry; roots %v; other leaves %v", prefix, n,
		100*float64(hit)/float64(n), fn, 100*float64(reach)/float64(n), roots, misses)
	return float64(hit) / float64(n), float64(reach) / float64(n), n
}

// reachesThreadEntry says whether a stack ends at the thread's entry:
// start_thread, or start_thread and below it glibc's clone3, which calls
// it. The frame-pointer chain ends at start_thread; the unwind rules of
// start_thread, where the walk went by them, lead one frame further, to
// clone3, whose own rules mark it the outermost frame.
func reachesThreadEntry(locs []*gpprof.Location) bool {
	name := func(l *gpprof.Location) string {
		if len(l.Line) == 0 {
			return ""
		}
		return l.Line[0].Function.Name
	}
	n := len(locs)
	switch name(locs[n-1]) {
	case "start_thread":
		return true
	case "clone3", "__clone3", "clone", "__clone":
		return n >= 2 && name(locs[n-2]) == "start_thread"
	}
	return false
}

// TestRecordJVMMethodNames records a real JVM with no manual step: record
// asks it for its perf map. Hot.late is first run (and compiled) after the
// recording started.
func TestRecordJVMMethodNames(t *testing.T) {
	needSampling(t)
	pid := startJava(t, nil, t.TempDir(), "2", "3000")
	mapPath := fmt.Sprintf("/tmp/perf-%d.map", pid)
	os.Remove(mapPath)
	out := filepath.Join(t.TempDir(), "jvm.pb.gz")
	stderr := recordChild(t, "--pid", fmt.Sprint(pid), "--duration", "7s", "--output", out)
	t.Logf("record:\n%s", stderr)
	if !strings.Contains(stderr, "asked JVMs for their perf maps") || strings.Contains(stderr, ", 0 failed") == false {
		t.Errorf("record reported no successful perf-map request")
	}
	for _, w := range []struct{ prefix, fn string }{{"hot-worker", "long Hot.work(long)"}, {"late-worker", "long Hot.late(long)"}} {
		named, entry, n := workerShares(t, out, w.prefix, w.fn)
		if named < 0.95 {
			t.Errorf("%s: %.1f%% of %d samples name %s, want >= 95%%", w.prefix, 100*named, n, w.fn)
		}
		if entry < 0.95 {
			t.Errorf("%s: %.1f%% of %d samples reach the thread entry, want >= 95%%", w.prefix, 100*entry, n)
		}
	}

	// The ground truth that the names come from the attach: without it
	// this JVM writes no map (the old one removed), and the method stays
	// an address.
	os.Remove(mapPath)
	out2 := filepath.Join(t.TempDir(), "noattach.pb.gz")
	recordChild(t, "--pid", fmt.Sprint(pid), "--duration", "2s", "--no-jvm-perfmap", "--output", out2)
	if named, _, n := workerShares(t, out2, "hot-worker", "long Hot.work(long)"); named > 0.05 {
		t.Errorf("--no-jvm-perfmap: %.1f%% of %d samples name Hot.work, want none", 100*named, n)
	}
}

// TestRecordJVMOtherUser: a JVM of an unprivileged user checks the
// attaching peer's euid/egid; record connects with its ids.
func TestRecordJVMOtherUser(t *testing.T) {
	needSampling(t)
	dir := t.TempDir()
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(dir), 0o755)
	pid := startJava(t, &syscall.Credential{Uid: 65534, Gid: 65534}, dir, "1")
	os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid))
	out := filepath.Join(t.TempDir(), "jvm.pb.gz")
	stderr := recordChild(t, "--pid", fmt.Sprint(pid), "--duration", "3s", "--output", out)
	t.Logf("record:\n%s", stderr)
	if named, _, n := workerShares(t, out, "hot-worker", "long Hot.work(long)"); named < 0.95 {
		t.Errorf("%.1f%% of %d samples name Hot.work, want >= 95%%", 100*named, n)
	}
}

// TestRecordNodeFunctionNames records a real Node.js process started with
// --perf-basic-prof: its hot function is named from /tmp/perf-PID.map.
func TestRecordNodeFunctionNames(t *testing.T) {
	testutil.RequireRoot(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH")
	}
	// hotLoop is looked for anywhere in the stack: it is called from the
	// script's top level, and were TurboFan to inline it there, its
	// samples would carry the script's name and the test would fail.
	src := `function hotLoop(n){let x=0;for(let i=0;i<n;i++){x=(x*31+i)%1000003}return x}
let s=0;console.log("ready");for(;;){s+=hotLoop(1e6)}`
	cmd := exec.Command(node, "--perf-basic-prof", "--interpreted-frames-native-stack", "-e", src)
	cmd.Dir = t.TempDir() // its V8 log goes to the working directory
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid)) })
	if !bufio.NewScanner(out).Scan() {
		t.Fatal("node did not start")
	}
	path := filepath.Join(t.TempDir(), "node.pb.gz")
	t.Logf("record:\n%s", recordChild(t, "--pid", fmt.Sprint(pid), "--duration", "3s", "--output", path))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := gpprof.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var n, hit int
	for _, s := range p.Sample {
		if tn := s.Label["thread.name"]; len(tn) == 0 || tn[0] != "node" {
			continue // the main thread runs the loop; V8's helpers do not
		}
		n += int(s.Value[0])
		for _, l := range s.Location {
			if len(l.Line) > 0 && strings.Contains(l.Line[0].Function.Name, "hotLoop") {
				hit += int(s.Value[0])
				break
			}
		}
	}
	t.Logf("node main thread: %d samples, %.1f%% with hotLoop", n, 100*float64(hit)/float64(max(n, 1)))
	if n == 0 || float64(hit) < 0.95*float64(n) {
		t.Errorf("%d of %d main-thread samples name hotLoop, want >= 95%%", hit, n)
	}
}
