package collect

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/sampler"
	"golang.org/x/sys/unix"
)

// placedRig is a process gone before /proc could be read: its image is
// this test binary placed from its exec event (proc.Process.Partial), and
// its "library" is a file mapped at libStart that only its exit capture
// names.
type placedRig struct {
	tr  *proc.Tracker
	c   *Collector
	lib sampler.VMA
}

const (
	placedPID = 300
	libStart  = 0x7f0000000000
)

func newPlacedRig(t *testing.T) *placedRig {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	typ, entry := ef.Type, ef.Entry
	ef.Close()
	if typ != elf.ET_EXEC {
		t.Skipf("test binary is %v, not ET_EXEC: its load bias is not its entry's", typ)
	}
	lib := filepath.Join(t.TempDir(), "libfoo.so")
	if err := os.WriteFile(lib, []byte("not really ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr := proc.NewTracker(filepath.Join(t.TempDir(), "proc"), nil) // no process dirs: every read fails
	t.Cleanup(func() { tr.Close() })
	r := &placedRig{tr: tr, c: New(Options{Frequency: 99, Tracker: tr, Kernel: testKernel(), NoVDSO: true}),
		lib: vmaOf(t, lib, libStart)}
	var st syscall.Stat_t
	if err := syscall.Stat(exe, &st); err != nil {
		t.Fatal(err)
	}
	r.c.ProcEvent(sampler.ProcEvent{PID: placedPID, Time: time.Now(), Image: &sampler.ExecImage{
		Path: exe, Dev: devString(st.Dev), Inode: st.Ino, Entry: entry}})
	if p := tr.Get(placedPID); !p.Partial || !p.AwaitsExit() {
		t.Fatalf("the exec placed %+v, want a partial image awaiting its exit", p)
	}
	return r
}

func devString(dev uint64) string {
	return fmt.Sprintf("%02x:%02x", unix.Major(dev), unix.Minor(dev))
}

// vmaOf is the kernel's capture of a mapping of path at start.
func vmaOf(t *testing.T, path string, start uint64) sampler.VMA {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return sampler.VMA{Start: start, End: start + 0x2000, Offset: 0x1000, Inode: st.Ino, Dev: devString(st.Dev), Path: path}
}

// sample is one of the process's samples: this binary's marker frames,
// then a return address in the library.
func (r *placedRig) sample() *sampler.Record {
	leaf := uint64(reflect.ValueOf(leafMarker).Pointer())
	outer := uint64(reflect.ValueOf(outerMarker).Pointer()) + 8
	return &sampler.Record{Kind: sampler.OnCPU, PID: placedPID, TID: placedPID, Comm: "short", Time: time.Now(), Value: 1,
		UserStack: []uint64{leaf, outer, libStart + 0x1010}}
}

// TestSamplesAwaitTheirExit: the samples of a process gone before its
// libraries were read wait for its exit, and are kept then, against the
// image with the mappings its exit captured; an exec of the pid or a
// report ends the wait with the image as it is; all counted.
func TestSamplesAwaitTheirExit(t *testing.T) {
	t.Run("exit with a capture", func(t *testing.T) {
		r := newPlacedRig(t)
		for range 3 {
			r.c.Add(r.sample())
		}
		// A stack inside the known mappings does not wait.
		s := r.sample()
		s.UserStack = s.UserStack[:2]
		r.c.Add(s)
		if st := r.c.Stats(); st.Samples != 1 || st.ExitAwaited != 0 {
			t.Fatalf("before the exit: %d samples kept, %d awaited; want 1 kept, 3 waiting", st.Samples, st.ExitAwaited)
		}
		r.c.ProcEvent(sampler.ProcEvent{PID: placedPID, Exit: true, Time: time.Now(), Maps: []sampler.VMA{r.lib}})
		st := r.c.Stats()
		if st.Samples != 4 || st.ExitAwaited != 3 || st.ExitAwaitMissed != 0 {
			t.Fatalf("after the exit: %d samples, %d awaited, %d missed; want 4, 3, 0", st.Samples, st.ExitAwaited, st.ExitAwaitMissed)
		}
		prof := r.c.Build(time.Now())
		inLib := 0
		for _, s := range prof.Samples {
			for _, f := range s.Frames {
				if f.Mapping != nil && filepath.Base(f.Mapping.Path) == "libfoo.so" {
					inLib++
				}
			}
		}
		if len(prof.Samples) != 4 || inLib != 3 {
			t.Fatalf("%d samples, %d frames in the captured library; want 4 and 3", len(prof.Samples), inLib)
		}
	})
	t.Run("an exec ends the wait", func(t *testing.T) {
		r := newPlacedRig(t)
		r.c.Add(r.sample())
		r.c.Add(r.sample())
		r.c.ProcEvent(sampler.ProcEvent{PID: placedPID, Time: time.Now(), Image: &sampler.ExecImage{Path: "/nonexistent"}})
		if st := r.c.Stats(); st.Samples != 2 || st.ExitAwaitMissed != 2 {
			t.Fatalf("after the exec: %d samples, %d missed; want 2, 2", st.Samples, st.ExitAwaitMissed)
		}
	})
	t.Run("a report ends the wait", func(t *testing.T) {
		r := newPlacedRig(t)
		r.c.Add(r.sample())
		if prof := r.c.Build(time.Now()); len(prof.Samples) != 1 {
			t.Fatalf("the report has %d samples, want the waiting one", len(prof.Samples))
		}
		if st := r.c.Stats(); st.ExitAwaitMissed != 1 {
			t.Fatalf("%d missed, want 1", st.ExitAwaitMissed)
		}
		// Its exit, after the report, has nothing left to add.
		r.c.ProcEvent(sampler.ProcEvent{PID: placedPID, Exit: true, Time: time.Now(), Maps: []sampler.VMA{r.lib}})
		if st := r.c.Stats(); st.Samples != 1 || st.ExitAwaited != 0 {
			t.Fatalf("%d samples, %d awaited; want 1, 0", st.Samples, st.ExitAwaited)
		}
	})
	t.Run("the wait is bounded", func(t *testing.T) {
		r := newPlacedRig(t)
		big := r.sample()
		big.StackTop = make([]byte, maxAwaitBytes/2)
		r.c.Add(big)
		r.c.Add(big) // over the bound: kept at once
		if st := r.c.Stats(); st.Samples != 1 || st.ExitAwaitMissed != 1 {
			t.Fatalf("%d samples kept, %d missed; want 1, 1", st.Samples, st.ExitAwaitMissed)
		}
		r.c.ProcEvent(sampler.ProcEvent{PID: placedPID, Exit: true, Time: time.Now(), Maps: []sampler.VMA{r.lib}})
		if st := r.c.Stats(); st.Samples != 2 || st.ExitAwaited != 1 {
			t.Fatalf("%d samples, %d awaited; want 2, 1", st.Samples, st.ExitAwaited)
		}
	})
}
