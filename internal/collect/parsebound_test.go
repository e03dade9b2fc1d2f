package collect

import (
	"bufio"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
)

// codeAddrs returns an address inside the first executable mapping of
// each of the files pid maps whose path contains one of names, in order.
func codeAddrs(t *testing.T, pid int, names ...string) []uint64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.Contains(fields[1], "x") {
			continue
		}
		for _, n := range names {
			if _, ok := found[n]; !ok && strings.Contains(fields[5], n) {
				lo, _, _ := strings.Cut(fields[0], "-")
				a, err := strconv.ParseUint(lo, 16, 64)
				if err != nil {
					t.Fatal(err)
				}
				found[n] = a + 0x40
			}
		}
	}
	var out []uint64
	for _, n := range names {
		a, ok := found[n]
		if !ok {
			t.Skipf("pid %d maps no executable %s", pid, n)
		}
		out = append(out, a)
	}
	return out
}

// TestEmitParseBoundDefersUntilParsed checks Options.ParseBytes: with a
// bound one parse exhausts, the first Emit names this process's stacks
// (the first binary it meets) and keeps the samples of a child whose
// stack needs two binaries not parsed yet; each later Emit parses one
// more, and the Emit that parses the last gives them, every one, equal to
// what an unbounded Build gives for the same records, in a profile that
// starts at or before their time. Nothing is named before it is parsed,
// nothing is lost, and the waits are counted.
func TestEmitParseBoundDefersUntilParsed(t *testing.T) {
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Skip("no sleep to run:", err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	// Let the loader map libc.
	var addrs []uint64
	for range 100 {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(child.Process.Pid) + "/maps"); strings.Contains(string(b), "libc") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	addrs = codeAddrs(t, child.Process.Pid, "libc", "sleep")
	own := testRecords()
	t0 := time.Unix(1699999990, 0) // before own's: the profile must reach back to it
	var theirs []*sampler.Record
	for i := range 10 {
		theirs = append(theirs, &sampler.Record{Kind: sampler.OnCPU, PID: uint32(child.Process.Pid), TID: uint32(child.Process.Pid),
			Comm: "sleep", Time: t0.Add(time.Duration(i) * time.Millisecond), Value: 1,
			UserStack: []uint64{addrs[0], addrs[1] + 1}})
	}
	c := New(Options{Frequency: 99, NoLeafRecovery: true, Kernel: testKernel(), ParseBytes: 1})
	ref := testCollector()
	for _, r := range own {
		c.Add(r)
	}
	for _, r := range theirs {
		c.Add(r)
		ref.Add(r)
	}
	want := ref.Build(time.Unix(1700000010, 0)).Samples

	var first []profile.Sample
	c.Emit(time.Unix(1700000010, 0), func(s *profile.Sample) { first = append(first, *s) })
	if len(first) != len(own) {
		t.Fatalf("first Emit gave %d samples, want this process's %d", len(first), len(own))
	}
	for _, s := range first {
		if s.PID != own[0].PID {
			t.Fatalf("first Emit gave a sample of pid %d, whose binaries were beyond the bound", s.PID)
		}
	}
	st := c.Stats()
	if st.Deferred != uint64(len(theirs)) || st.Waiting != len(theirs) {
		t.Fatalf("after the first Emit: deferred %d, waiting %d, want %d each", st.Deferred, st.Waiting, len(theirs))
	}
	var got []profile.Sample
	var prof *profile.Profile
	emits := 1
	for len(got) == 0 && emits < MaxWaits+2 {
		emits++
		prof = c.Emit(time.Unix(1700000010+int64(emits)*10, 0), func(s *profile.Sample) { got = append(got, *s) })
	}
	if len(got) != len(theirs) {
		t.Fatalf("after %d Emits got %d samples of the child, want %d", emits, len(got), len(theirs))
	}
	if emits != 3 {
		t.Errorf("the child's samples came with Emit %d, want 3 (one parse each after the first)", emits)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the samples that waited differ from an unbounded Build's:\n got %+v\nwant %+v", got, want)
	}
	if prof.Start.After(t0) {
		t.Errorf("the profile that gave them starts at %v, after their first at %v", prof.Start, t0)
	}
	st = c.Stats()
	if st.Deferred != uint64(2*len(theirs)) || st.Waiting != 0 || st.Forced != 0 {
		t.Errorf("at the end: deferred %d (want %d), waiting %d, forced %d", st.Deferred, 2*len(theirs), st.Waiting, st.Forced)
	}
	if n := c.opts.Tracker.Held(); n != 0 {
		t.Errorf("%d images still held", n)
	}
}

// TestEmitAllIgnoresParseBound checks that EmitAll (an agent's last
// report) names every stack, whatever the parse bound.
func TestEmitAllIgnoresParseBound(t *testing.T) {
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Skip("no sleep to run:", err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	for range 100 {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(child.Process.Pid) + "/maps"); strings.Contains(string(b), "libc") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	addrs := codeAddrs(t, child.Process.Pid, "libc", "sleep")
	c := New(Options{Frequency: 99, NoLeafRecovery: true, Kernel: testKernel(), ParseBytes: 1})
	for _, r := range testRecords() {
		c.Add(r)
	}
	c.Add(&sampler.Record{Kind: sampler.OnCPU, PID: uint32(child.Process.Pid), TID: uint32(child.Process.Pid),
		Comm: "sleep", Time: time.Unix(1700000000, 0), Value: 1, UserStack: []uint64{addrs[0], addrs[1] + 1}})
	n := 0
	c.EmitAll(time.Unix(1700000010, 0), func(s *profile.Sample) { n++ })
	if want := len(testRecords()) + 1; n != want {
		t.Errorf("EmitAll gave %d samples, want %d", n, want)
	}
	if st := c.Stats(); st.Deferred != 0 || st.Waiting != 0 {
		t.Errorf("EmitAll deferred %d, left %d waiting", st.Deferred, st.Waiting)
	}
}
