package collect

import (
	"os"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
)

// fakeKernel names kernel addresses by the nearest symbol at or below.
type fakeKernel struct {
	starts []uint64
	names  []string
}

var testKernelMap = &profile.Mapping{Path: "[kernel.kallsyms]", Kernel: true}

func newFakeKernel(syms map[uint64]string) *fakeKernel {
	k := &fakeKernel{}
	for a := range syms {
		k.starts = append(k.starts, a)
	}
	slices.Sort(k.starts)
	for _, a := range k.starts {
		k.names = append(k.names, syms[a])
	}
	return k
}

func (k *fakeKernel) Frames(dst []profile.Frame, addr uint64) []profile.Frame {
	i := sort.Search(len(k.starts), func(i int) bool { return k.starts[i] > addr }) - 1
	f := profile.Frame{Address: addr, Mapping: testKernelMap}
	if i >= 0 {
		f.Function = k.names[i]
	}
	return append(dst, f)
}

// Kernel functions of the fake, 0x100 bytes each; a stack holds an
// address inside (a return address: +8).
const (
	kBPFProg = 0xffffffff81000000 + 0x100*iota
	kTraceiter
	kSchedule
	kDoNanosleep
	kFutexWait
	kSyscall
)

func testKernel() *fakeKernel {
	return newFakeKernel(map[uint64]string{
		kBPFProg: "bpf_prog_123_offcpu", kTraceiter: "__traceiter_sched_switch",
		kSchedule: "__schedule", kDoNanosleep: "do_nanosleep",
		kFutexWait: "futex_wait_queue", kSyscall: "do_syscall_64",
	})
}

//go:noinline
func callersAt(depth int, pcs []uintptr) int {
	if depth > 0 {
		return callersAt(depth-1, pcs)
	}
	return runtime.Callers(0, pcs)
}

// userStack is a real stack of this process (return addresses), so that
// the user frames go through the symbolizer.
func userStack(depth int) []uint64 {
	pcs := make([]uintptr, 64)
	n := callersAt(depth, pcs)
	out := make([]uint64, n)
	for i, pc := range pcs[:n] {
		out[i] = uint64(pc)
	}
	return out
}

// testRecords returns records of this process over a few stacks, each
// record with its own copy of its stack (as the decoder hands them over)
// and its own time, thread, value, state and link.
func testRecords() []*sampler.Record {
	pid := uint32(os.Getpid())
	users := [][]uint64{userStack(1), userStack(3), userStack(6), nil}
	kerns := [][]uint64{
		{kBPFProg + 8, kTraceiter + 8, kSchedule + 8, kDoNanosleep + 8, kSyscall + 8},
		{kBPFProg + 8, kTraceiter + 8, kSchedule + 8, kFutexWait + 8, kSyscall + 8},
		nil,
	}
	comms := []string{"main", "worker-1", "worker-2"}
	t0 := time.Unix(1700000000, 123456789)
	var rs []*sampler.Record
	for i := range 60 {
		r := &sampler.Record{
			Kind: sampler.OnCPU, PID: pid, TID: pid + uint32(i%5), CPU: uint32(i % 2),
			Comm: comms[i%len(comms)], Time: t0.Add(time.Duration(i) * 1013 * time.Microsecond),
			Value:     1,
			UserStack: slices.Clone(users[i%len(users)]),
		}
		if i%2 == 1 {
			r.Kind, r.Value = sampler.OffCPU, int64(1000+i)
			r.State = "SD"[i/2%2]
			r.KernStack = slices.Clone(kerns[i/2%len(kerns)])
		}
		if i%3 == 0 {
			r.Link = sampler.Link{TraceID: [16]byte{byte(i), 1}, SpanID: [8]byte{byte(i), 2}}
		}
		rs = append(rs, r)
	}
	return rs
}

func testCollector() *Collector {
	return New(Options{Frequency: 99, NoLeafRecovery: true, Kernel: testKernel()})
}

// TestBuildKeepsEachSample checks that a profile built from many records
// over few stacks holds, for every record in order, the sample a profile
// of that record alone holds (frames, reason), with the record's own
// time, thread, CPU, value, state and span link.
func TestBuildKeepsEachSample(t *testing.T) {
	rs := testRecords()
	c := testCollector()
	for _, r := range rs {
		c.Add(r)
	}
	end := time.Unix(1700000010, 0)
	prof := c.Build(end)
	if len(prof.Samples) != len(rs) {
		t.Fatalf("built %d samples from %d records", len(prof.Samples), len(rs))
	}
	if prof.End != end || prof.Frequency != 99 || len(prof.Processes) != 1 || prof.Processes[rs[0].PID] == nil {
		t.Errorf("profile end %v, frequency %d, processes %v", prof.End, prof.Frequency, prof.Processes)
	}
	for i, r := range rs {
		s := prof.Samples[i]
		state := ""
		if r.State != 0 {
			state = string(rune(r.State))
		}
		if s.Kind != wantKind[r.Kind] || s.PID != r.PID || s.TID != r.TID || s.CPU != r.CPU || s.ThreadName != r.Comm ||
			s.Time != r.Time || s.Value != r.Value || s.Link != profile.Link(r.Link) || s.State != state {
			t.Errorf("sample %d: %+v, from record %+v", i, s, r)
		}
		one := testCollector()
		one.Add(r)
		want := one.Build(end).Samples[0]
		if !reflect.DeepEqual(s, want) {
			t.Errorf("sample %d differs from the record built alone:\n got %+v\nwant %+v", i, s, want)
		}
		if r.Kind == sampler.OffCPU && len(r.KernStack) > 0 {
			if len(s.Frames) == 0 || s.Frames[0].Function != "__schedule" {
				t.Errorf("sample %d: off-CPU frames %v, want the tracing frames cut", i, s.Frames)
			}
			if s.Reason != "do_nanosleep" && s.Reason != "futex_wait_queue" {
				t.Errorf("sample %d: reason %q", i, s.Reason)
			}
		}
		if n := len(r.UserStack); n > 0 && (len(s.Frames) < n || s.Frames[len(s.Frames)-1].Function == "") {
			t.Errorf("sample %d: %d frames for %d user addresses, outermost %+v", i, len(s.Frames), n, s.Frames[len(s.Frames)-1])
		}
	}
}

// TestEmitGivesWhatBuildGives checks that Emit hands over, one at a
// time and in order, the samples Build returns for the same records, with
// the same profile around them.
func TestEmitGivesWhatBuildGives(t *testing.T) {
	rs := testRecords()
	emitted, built := testCollector(), testCollector()
	for _, r := range rs {
		emitted.Add(r)
		built.Add(r)
	}
	end := time.Unix(1700000010, 0)
	var got []profile.Sample
	prof := emitted.Emit(end, func(s *profile.Sample) { got = append(got, *s) })
	want := built.Build(end)
	if len(prof.Samples) != 0 {
		t.Errorf("Emit's profile holds %d samples", len(prof.Samples))
	}
	if !reflect.DeepEqual(got, want.Samples) {
		t.Errorf("emitted samples differ from built ones")
	}
	prof.Samples, prof.Start, want.Start = want.Samples, time.Time{}, time.Time{} // each collector started at its New
	if !reflect.DeepEqual(prof, want) {
		t.Errorf("Emit's profile %+v, Build's %+v", prof, want)
	}
	if again := emitted.Emit(end, func(*profile.Sample) { t.Error("a sample emitted twice") }); again.Start != end {
		t.Errorf("the next interval starts at %v, want %v", again.Start, end)
	}
}

// TestBuildSharesFramesOfIdenticalStacks checks that samples of one stack
// (same process, kernel and user addresses) share one symbolized stack,
// and samples of different stacks do not.
func TestBuildSharesFramesOfIdenticalStacks(t *testing.T) {
	pid := uint32(os.Getpid())
	user := userStack(2)
	rec := func(tid uint32, user []uint64) *sampler.Record {
		return &sampler.Record{Kind: sampler.OnCPU, PID: pid, TID: tid, Comm: "t", Time: time.Unix(0, int64(tid)), Value: 1,
			UserStack: slices.Clone(user)}
	}
	c := testCollector()
	c.Add(rec(1, user))
	c.Add(rec(2, user))
	c.Add(rec(3, user[1:]))
	if n := c.stacks.len(); n != 2 {
		t.Errorf("%d stacks stored for 2 distinct ones", n)
	}
	s := c.Build(time.Now()).Samples
	if &s[0].Frames[0] != &s[1].Frames[0] {
		t.Error("two samples of one stack hold two copies of its frames")
	}
	if &s[0].Frames[0] == &s[2].Frames[0] {
		t.Error("samples of different stacks share frames")
	}
	if s[0].TID != 1 || s[1].TID != 2 || s[0].Time == s[1].Time {
		t.Errorf("samples of one stack lost their own thread or time: %+v, %+v", s[0], s[1])
	}
}

// TestAddKeepsMemoryPerDistinctStack checks that what the collector keeps
// until the next Build grows with the distinct stacks, not with the
// records: records of deep stacks repeating a few cost the collector no
// more than a small fixed size each (the old collector kept every
// record's stacks, over 600 bytes here), and Build still yields them all
// in order.
func TestAddKeepsMemoryPerDistinctStack(t *testing.T) {
	pid := uint32(os.Getpid())
	var stacks [4][]uint64
	for i := range stacks {
		for j := range 64 {
			stacks[i] = append(stacks[i], 0x400000+uint64(i)<<16+uint64(j)<<4)
		}
	}
	const n = 20000
	c := testCollector()
	c.Add(&sampler.Record{PID: pid}) // reads the process first
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t0 := time.Unix(1700000000, 0) // as the sampler makes times: time.Unix(0, ns)
	for i := range n {
		st := slices.Clone(stacks[i%len(stacks)])
		c.Add(&sampler.Record{Kind: sampler.OffCPU, PID: pid, TID: pid + uint32(i%100), Comm: "w",
			Time: t0.Add(time.Duration(i)), Value: 5000, State: 'S',
			KernStack: st[:32], UserStack: st[32:]})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perRecord := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d bytes kept per record", perRecord)
	if perRecord > 128 {
		t.Errorf("the collector keeps %d bytes per record of a repeated stack, want at most 128", perRecord)
	}
	got := c.Build(time.Now()).Samples
	if len(got) != n+1 {
		t.Fatalf("built %d samples, want %d", len(got), n+1)
	}
	for i, s := range got[1:] { // in the order added, over many chunks
		if want := t0.Add(time.Duration(i)); s.Time != want || s.TID != pid+uint32(i%100) {
			t.Fatalf("sample %d: time %v, thread %d; want %v, %d", i+1, s.Time, s.TID, want, pid+uint32(i%100))
		}
	}
}

// TestSampleTimes checks that a time made as the sampler makes it
// (time.Unix(0, ns)) comes back from the collector as it was, and any
// other time with its instant (without a monotonic reading).
func TestSampleTimes(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name  string
		in    time.Time
		exact bool
	}{
		{"sampler", time.Unix(0, 1700000000123456789), true},
		{"zero", time.Time{}, true},
		{"epoch", time.Unix(0, 0), true},
		{"now", now, false},
		{"utc", time.Unix(5, 6).UTC(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := toUnixNano(tt.in).time()
			if tt.exact && got != tt.in || !got.Equal(tt.in) {
				t.Errorf("%v came back as %v", tt.in, got)
			}
		})
	}
}

func TestStackTable(t *testing.T) {
	var st stackTable
	a := st.intern(7, 0, []uint64{1, 2}, []uint64{3})
	b := st.intern(7, 0, []uint64{1}, []uint64{2, 3}) // same addresses, split differently
	c := st.intern(8, 0, []uint64{1, 2}, []uint64{3})
	d := st.intern(7, 0, nil, nil)
	e := st.intern(7, 1, []uint64{1, 2}, []uint64{3}) // an image pinned inside an exec
	if again := st.intern(7, 0, []uint64{1, 2}, []uint64{3}); again != a {
		t.Errorf("the same stack got ids %d and %d", a, again)
	}
	if ids := []uint32{a, b, c, d, e}; len(slices.Compact(slices.Sorted(slices.Values(ids)))) != 5 || st.len() != 5 {
		t.Errorf("ids %v, %d stacks; want 5 distinct", ids, st.len())
	}
	var buf []uint64
	tests := []struct {
		id         uint32
		pid, image uint32
		kern, user []uint64
	}{
		{a, 7, 0, []uint64{1, 2}, []uint64{3}}, {b, 7, 0, []uint64{1}, []uint64{2, 3}},
		{c, 8, 0, []uint64{1, 2}, []uint64{3}}, {d, 7, 0, nil, nil}, {e, 7, 1, []uint64{1, 2}, []uint64{3}},
	}
	for _, tt := range tests {
		pid, image, kern, user := st.stack(tt.id, &buf)
		if pid != tt.pid || image != tt.image || !slices.Equal(kern, tt.kern) || !slices.Equal(user, tt.user) {
			t.Errorf("stack %d: pid %d, image %d, kern %x, user %x; want %d, %d, %x, %x",
				tt.id, pid, image, kern, user, tt.pid, tt.image, tt.kern, tt.user)
		}
	}
}

// TestBuildCutsStackAtNonCode: a return address in none of a fully read
// process's code mappings ends the user stack there (what follows came
// from a register that held no frame pointer) and is counted; the frames
// before it are those of the stack without it.
func TestBuildCutsStackAtNonCode(t *testing.T) {
	pid := uint32(os.Getpid())
	real := userStack(3)
	if len(real) < 4 {
		t.Fatalf("test stack of %d frames", len(real))
	}
	broken := append(slices.Clone(real[:2]), 0x1000, real[2], real[3])
	end := time.Unix(1700000010, 0)
	build := func(user []uint64) (*profile.Profile, Stats) {
		c := testCollector()
		c.Add(&sampler.Record{Kind: sampler.OnCPU, PID: pid, TID: pid, Value: 1, Time: end.Add(-time.Second), UserStack: user})
		return c.Build(end), c.Stats()
	}
	got, st := build(broken)
	want, wst := build(slices.Clone(real[:2]))
	if !reflect.DeepEqual(got.Samples[0].Frames, want.Samples[0].Frames) {
		t.Errorf("broken stack built as\n%+v\nwant the frames before the non-code address\n%+v", got.Samples[0].Frames, want.Samples[0].Frames)
	}
	if st.StacksCut != 1 || wst.StacksCut != 0 {
		t.Errorf("stacks cut: %d for the broken stack, %d for the whole one; want 1 and 0", st.StacksCut, wst.StacksCut)
	}
	whole, _ := build(slices.Clone(real))
	if n := len(whole.Samples[0].Frames); n <= len(want.Samples[0].Frames) {
		t.Errorf("the whole stack has %d frames, no more than its first two addresses", n)
	}
}

// wantKind is the profile's kind of each sampler kind.
var wantKind = map[sampler.Kind]profile.Kind{sampler.OnCPU: profile.OnCPU, sampler.OffCPU: profile.OffCPU}

// TestRecordReasonOverridesTheStacks checks that an off-CPU record that
// names its own wait reason (the goroutine-wait sampler's) keeps it,
// while records of the same stacks without one get the reason of their
// kernel stack, and that neither changes the other's frames.
func TestRecordReasonOverridesTheStacks(t *testing.T) {
	var rs []*sampler.Record
	for _, r := range testRecords() {
		if r.Kind == sampler.OffCPU && len(r.KernStack) > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) < 2 {
		t.Fatalf("%d off-CPU test records", len(rs))
	}
	own := *rs[0]
	own.Reason = "chan receive"
	goroutine := *rs[0]
	goroutine.KernStack, goroutine.Reason = nil, "sync.Mutex.Lock"
	c := testCollector()
	for _, r := range append(rs, &own, &goroutine) {
		c.Add(r)
	}
	samples := c.Build(time.Unix(1700000010, 0)).Samples
	if len(samples) != len(rs)+2 {
		t.Fatalf("%d samples from %d records", len(samples), len(rs)+2)
	}
	for i := range rs {
		if r := samples[i].Reason; r != "do_nanosleep" && r != "futex_wait_queue" {
			t.Errorf("sample %d: reason %q, want its kernel stack's", i, r)
		}
	}
	got := samples[len(rs)]
	if got.Reason != own.Reason || !reflect.DeepEqual(got.Frames, samples[0].Frames) {
		t.Errorf("record with its own reason: reason %q, frames %v; want %q and the frames of the same stack %v",
			got.Reason, got.Frames, own.Reason, samples[0].Frames)
	}
	if g := samples[len(rs)+1]; g.Reason != goroutine.Reason || len(g.Frames) != len(rs[0].UserStack) {
		t.Errorf("record without a kernel stack: reason %q, %d frames; want %q and one frame per user address", g.Reason, len(g.Frames), goroutine.Reason)
	}
}
