package collect

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/sampler"
)

// fakeProcs is a procfs root whose processes map either this test binary
// (the image before an exec) or another file at the same addresses (the
// image after it), so that the same addresses name test functions only
// when symbolized against the image before.
type fakeProcs struct {
	t          *testing.T
	root       string
	self       []proc.Mapping // this binary's code mappings
	other      string         // the file of the image after the exec
	otherInode uint64
}

func newFakeProcs(t *testing.T) *fakeProcs {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	defer f.Close()
	ms, err := proc.ParseMaps(f)
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakeProcs{t: t, root: filepath.Join(t.TempDir(), "proc"), other: filepath.Join(t.TempDir(), "new-image")}
	for _, m := range ms {
		if m.Path == exe {
			fp.self = append(fp.self, m)
		}
	}
	if len(fp.self) == 0 {
		t.Skipf("no code mapping of %s in /proc/self/maps", exe)
	}
	if err := os.WriteFile(fp.other, []byte("not an ELF file"), 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(fp.other)
	if err != nil {
		t.Fatal(err)
	}
	fp.otherInode = st.Sys().(*syscall.Stat_t).Ino
	return fp
}

// write makes pid's maps show this binary (before) or the other file at
// the same addresses (after its exec).
func (fp *fakeProcs) write(pid uint32, before bool) {
	t := fp.t
	t.Helper()
	dir := filepath.Join(fp.root, fmt.Sprint(pid))
	var maps strings.Builder
	for _, m := range fp.self {
		path, dev, ino := m.Path, m.Dev, m.Inode
		if !before {
			path, dev, ino = fp.other, "fe:01", fp.otherInode
		}
		fmt.Fprintf(&maps, "%x-%x r-xp %08x %s %d %s\n", m.Start, m.End, m.Offset, dev, ino, path)
		link := filepath.Join(dir, "root", path)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(path, link); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(maps.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// Two processes of one pid started at different times.
	start := 1000
	if !before {
		start = 2000
	}
	stat := fmt.Sprintf("%d (churn) S 1 %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, pid, pid, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPreExecSampleSymbolizedAgainstImageBefore: a sample taken inside an
// exec, with the user registers of the image before it, is symbolized (and
// its leaf fixed) against that image: the process as read before the exec,
// whether the exec is reported before or after the sample is added, else
// its parent's for a process never read (a posix_spawn child). It keeps
// its own pid, thread, name and time, and the images held for it are
// released after the report. A sample not flagged, at the same addresses,
// is symbolized against the process's image of the report.
func TestPreExecSampleSymbolizedAgainstImageBefore(t *testing.T) {
	leaf := uint64(reflect.ValueOf(leafMarker).Pointer())
	caller := bodyReturn(t, callerMarker)
	outer := bodyReturn(t, outerMarker)
	top := make([]byte, 64)
	binary.LittleEndian.PutUint64(top, caller)
	const (
		pid    = 100
		parent = 90
	)
	tests := []struct {
		name string
		// readBefore: the process was read before the exec began.
		// execFirst: the reader read the exec before the sample is
		// added (it reads as it decodes the event, ahead of the
		// consumer); the exec is applied after the sample, in stream
		// order.
		readBefore, execFirst bool
		flagged               bool
		want                  string
		attributed            uint64
	}{
		{"read before, exec reported after", true, false, true, "leafMarker callerMarker outerMarker", 1},
		{"read before, exec read first", true, true, true, "leafMarker callerMarker outerMarker", 1},
		{"never read: the parent's image", false, true, true, "leafMarker callerMarker outerMarker", 1},
		{"never read, exec reported after", false, false, true, "leafMarker callerMarker outerMarker", 1},
		// Taken before the exec, so of the image before, flagged or not
		// (a sample of the old image handled after the exec was reported).
		{"not flagged, taken before the exec", true, true, false, "leafMarker callerMarker outerMarker", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp := newFakeProcs(t)
			tr := proc.NewTracker(fp.root, nil)
			defer tr.Close()
			fp.write(parent, true)
			fp.write(pid, true)
			tr.Get(parent)
			if tt.readBefore {
				tr.Get(pid)
			}
			c := New(Options{Frequency: 99, Tracker: tr, Kernel: testKernel(), NoVDSO: true})
			at := time.Now() // inside the exec
			time.Sleep(time.Millisecond)
			fp.write(pid, false)
			exec := sampler.ProcEvent{PID: pid, Time: time.Now()}
			if tt.execFirst {
				exec.Read = tr.ReadExec(pid, exec.Time, nil)
			}
			r := &sampler.Record{
				Kind: sampler.OnCPU, PID: pid, TID: pid + 1, CPU: 1, Comm: "new-name", Time: at, Value: 1,
				UserIP: leaf, UserSP: 0x7ffd0000, StackTop: top,
				UserStack: []uint64{leaf, outer},
				KernStack: []uint64{kSyscall + 8},
				PreExec:   tt.flagged, ParentPID: parent,
			}
			c.Add(r)
			c.ProcEvent(exec)
			// A sample after the exec at the same addresses is the new
			// image's, in the same report.
			c.Add(&sampler.Record{Kind: sampler.OnCPU, PID: pid, TID: pid, Comm: "new-name", Time: time.Now(), Value: 1,
				UserStack: []uint64{leaf, outer}})
			if got := tr.Get(pid); got.Mappings[0].Path != fp.other {
				t.Fatalf("after the exec the tracker has %s, want %s", got.Mappings[0].Path, fp.other)
			}
			st := c.Stats()
			prof := c.Build(time.Now())
			if len(prof.Samples) != 2 {
				t.Fatalf("%d samples, want 2", len(prof.Samples))
			}
			for _, f := range prof.Samples[1].Frames {
				if f.Function != "" {
					t.Errorf("sample after the exec symbolized against the image before: %+v", prof.Samples[1].Frames)
				}
			}
			s := prof.Samples[0]
			if s.PID != pid || s.TID != pid+1 || s.CPU != 1 || s.ThreadName != "new-name" || !s.Time.Equal(at) || prof.Processes[pid] == nil {
				t.Errorf("sample pid %d tid %d cpu %d name %q time %v, processes %v; want the record's own",
					s.PID, s.TID, s.CPU, s.ThreadName, s.Time, prof.Processes)
			}
			var names []string
			for _, f := range s.Frames {
				if f.Function != "" {
					names = append(names, f.Function)
				}
			}
			got := shortNames(strings.Join(names, " "))
			if tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("frames %q, want %q", got, tt.want)
			}
			if tt.want == "" && strings.Contains(got, "Marker") {
				t.Errorf("a sample not flagged was symbolized against the image before the exec: %q", got)
			}
			if got := s.Frames[0].Function; got != "do_syscall_64" {
				t.Errorf("leaf frame %q, want the kernel's", got)
			}
			if st.PreExecAttributed != tt.attributed || st.PreExec != st.PreExecAttributed || st.Samples != 2 {
				t.Errorf("stats %+v, want %d samples inside an exec attributed", st, tt.attributed)
			}
			// Once reported and past two reports, only the new image's
			// file stays open: the held image was released.
			tr.ForgetExited(time.Now())
			tr.ForgetExited(time.Now())
			tr.Exit(parent, time.Now())
			tr.ForgetExited(time.Now())
			if n := tr.OpenFiles(); n != 1 {
				t.Errorf("%d files open after the reports, want 1 (the new image's)", n)
			}
		})
	}
}

// TestPreExecImageHeldOncePerReport: the samples of many processes taken
// inside their exec share their parent's image, held once per report;
// neither process nor parent known leaves the sample to the process's own
// image, counted as not attributed.
func TestPreExecImageHeldOncePerReport(t *testing.T) {
	fp := newFakeProcs(t)
	tr := proc.NewTracker(fp.root, nil)
	defer tr.Close()
	const parent = 90
	fp.write(parent, true)
	c := New(Options{Frequency: 99, Tracker: tr, Kernel: testKernel(), NoVDSO: true, NoLeafRecovery: true})
	user := userStack(2)
	for pid := uint32(100); pid < 110; pid++ {
		c.Add(&sampler.Record{Kind: sampler.OnCPU, PID: pid, TID: pid, Comm: "child", Time: time.Now(), Value: 1,
			UserStack: user, PreExec: true, ParentPID: parent})
	}
	c.Add(&sampler.Record{Kind: sampler.OnCPU, PID: 200, TID: 200, Comm: "orphan", Time: time.Now(), Value: 1,
		UserStack: user, PreExec: true, ParentPID: 201})
	// The parent's image for the 10 children, the orphan's own.
	if n, held := len(c.held), tr.Held(); n != 2 || held != 2 {
		t.Fatalf("%d images held for 10 children of one parent and an orphan (%d in the tracker), want 2", n, held)
	}
	if st := c.Stats(); st.PreExec != 11 || st.PreExecAttributed != 10 {
		t.Errorf("stats %+v, want 11 inside an exec, 10 attributed", st)
	}
	prof := c.Build(time.Now())
	for _, s := range prof.Samples {
		named := s.Frames[0].Function != ""
		if named != (s.PID != 200) {
			t.Errorf("pid %d: first frame %+v", s.PID, s.Frames[0])
		}
	}
	if len(prof.Processes) != 11 {
		t.Errorf("%d processes in the profile, want 11 (each sample's own)", len(prof.Processes))
	}
	if len(c.held) != 0 || tr.Held() != 0 {
		t.Errorf("%d images still held after the report (%d in the tracker)", len(c.held), tr.Held())
	}
}

// reusedPID is a collector over a fake /proc where pid 100 runs this test
// binary's image (fakeProcs.write before), for the pid-reuse tests.
type reusedPID struct {
	fp *fakeProcs
	tr *proc.Tracker
	c  *Collector
}

const reusePID = 100

func newReusedPID(t *testing.T) *reusedPID {
	fp := newFakeProcs(t)
	tr := proc.NewTracker(fp.root, nil)
	t.Cleanup(func() { tr.Close() })
	fp.write(reusePID, true) // the first process: this test binary's image
	return &reusedPID{fp: fp, tr: tr, c: New(Options{Frequency: 99, Tracker: tr, Kernel: testKernel(), NoVDSO: true})}
}

// sample is one of the pid's samples, with this binary's two marker frames.
func (r *reusedPID) sample(at time.Time) *sampler.Record {
	leaf := uint64(reflect.ValueOf(leafMarker).Pointer())
	outer := uint64(reflect.ValueOf(outerMarker).Pointer()) + 8
	return &sampler.Record{Kind: sampler.OnCPU, PID: reusePID, TID: reusePID, Comm: "churn", Time: at, Value: 1,
		UserStack: []uint64{leaf, outer}}
}

// check builds the report and wants its first `first` of n samples named
// in the first process's image, the others not.
func (r *reusedPID) check(t *testing.T, n, first int) {
	t.Helper()
	prof := r.c.Build(time.Now())
	if len(prof.Samples) != n {
		t.Fatalf("%d samples, want %d", len(prof.Samples), n)
	}
	for i, s := range prof.Samples {
		named := false
		for _, f := range s.Frames {
			named = named || strings.Contains(f.Function, "Marker")
		}
		if want := i < first; named != want {
			t.Errorf("sample %d named in the first process's image: %v, want %v (%+v)", i, named, want, s.Frames)
		}
	}
}

// TestPIDReusedByFork: a pid whose process exited is taken by a process
// that forked and never exec'd, so no exec event tells of it; its fork
// event does. Samples taken after the fork are symbolized against the
// process now holding the pid; those taken before, against the one that
// exited. While the pid still shows the exited process (its other threads
// dying after the leader's exit event), later samples keep its image.
//
// The events come in stream order: the samples taken before the exit
// precede its event, the fork's follow its fork event (the fork took the
// pid after the exit). The exit marks the exited process, never the fork.
func TestPIDReusedByFork(t *testing.T) {
	r := newReusedPID(t)
	r.c.Add(r.sample(time.Now())) // read at first sight
	r.c.Add(r.sample(time.Now())) // taken before the exit
	r.c.ProcEvent(sampler.ProcEvent{PID: reusePID, Exit: true, Time: time.Now()})
	time.Sleep(time.Millisecond)
	r.c.Add(r.sample(time.Now())) // the exiting process still holds the pid
	time.Sleep(time.Millisecond)
	r.fp.write(reusePID, false) // a fork of another program takes the pid
	// Its parent is not tracked: the fork is read at its first sample.
	r.c.ProcEvent(sampler.ProcEvent{PID: reusePID, Fork: true, Parent: reusePID + 1, Time: time.Now()})
	r.c.Add(r.sample(time.Now()))
	if p := r.tr.Get(reusePID); p.Exited {
		t.Errorf("the fork holding the pid is marked exited: %+v", p)
	}
	r.check(t, 4, 3)
	if n := r.tr.Stats().Forked; n != 1 {
		t.Errorf("Stats().Forked = %d, want 1", n)
	}
}

// TestForkSharesItsParentsImage: a fork runs its parent's image until it
// execs. Its samples are named against the parent's mappings, also when
// the child is gone before /proc could be read, and its entry is its own:
// the parent's exit does not mark it.
func TestForkSharesItsParentsImage(t *testing.T) {
	r := newReusedPID(t)
	r.c.Add(r.sample(time.Now())) // the parent, read at first sight
	const child = reusePID + 1    // never in the fake /proc
	r.c.ProcEvent(sampler.ProcEvent{PID: child, Fork: true, Parent: reusePID, Time: time.Now()})
	r.c.ProcEvent(sampler.ProcEvent{PID: reusePID, Exit: true, Time: time.Now()})
	s := r.sample(time.Now())
	s.PID, s.TID = child, child
	r.c.Add(s)
	if p := r.tr.Get(child); p == nil || p.Exited || p.PID != child || len(p.Mappings) == 0 {
		t.Errorf("the fork's entry: %+v, want its own, live, with its parent's mappings", p)
	}
	r.check(t, 2, 2)
	if n := r.tr.Stats().Forked; n != 0 {
		t.Errorf("Stats().Forked = %d, want 0: no pid was reused", n)
	}
}

// TestPIDReusedInOneReport: under churn a pid is reused within a report
// (record keeps every process until its one report, and 1,000 processes a
// second wrap a 32,768 pid space in half a minute). The samples of the
// earlier process are symbolized against its image, not the later one's.
//
// In stream order the earlier process's second sample comes before its
// exit event, or after it when a thread outlives the leader's exit.
func TestPIDReusedInOneReport(t *testing.T) {
	for _, afterExit := range []bool{false, true} {
		t.Run(fmt.Sprintf("sample after the exit event %v", afterExit), func(t *testing.T) {
			r := newReusedPID(t)
			r.c.Add(r.sample(time.Now())) // read at first sight
			late := r.sample(time.Now())
			if !afterExit {
				r.c.Add(late)
			}
			r.c.ProcEvent(sampler.ProcEvent{PID: reusePID, Exit: true, Time: time.Now()})
			time.Sleep(time.Millisecond)
			r.fp.write(reusePID, false) // the pid's next process: another image
			exec := sampler.ProcEvent{PID: reusePID, Time: time.Now()}
			// The reader reads the exec as it decodes it, before the
			// consumer handles the samples ahead of it.
			exec.Read = r.tr.ReadExec(reusePID, exec.Time, nil)
			if afterExit {
				r.c.Add(late)
			}
			r.c.ProcEvent(exec)
			r.c.Add(r.sample(time.Now()))
			r.check(t, 3, 2)
		})
	}
}
