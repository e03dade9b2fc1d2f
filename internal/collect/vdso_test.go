package collect

import (
	"debug/elf"
	"os/exec"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// vdsoFunc returns the offset of clock_gettime in the kernel's vDSO.
func vdsoFunc(t *testing.T) uint64 {
	t.Helper()
	v, err := symbolize.SelfVDSO()
	if err != nil {
		t.Skipf("no vDSO here: %v", err)
	}
	ef, err := elf.Open(v.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, _ := ef.DynamicSymbols()
	for _, s := range syms {
		if s.Name == "clock_gettime" && s.Size > 0 {
			return s.Value + s.Size/2
		}
	}
	t.Skip("no clock_gettime in this vDSO")
	return 0
}

// TestVDSOFramesNamed checks that [vdso] frames are named, for a live
// process read from /proc and for one known only from the mappings
// captured at its exit.
func TestVDSOFramesNamed(t *testing.T) {
	off := vdsoFunc(t)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := uint32(cmd.Process.Pid)
	var vdso *proc.Mapping
	live := proc.NewTracker("/proc", nil)
	defer live.Close()
	for deadline := time.Now().Add(5 * time.Second); vdso == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		live.Exec(pid, time.Now(), nil) // read again until sleep runs
		for _, m := range live.Get(pid).Mappings {
			if m.Path == "[vdso]" {
				vdso = &m
			}
		}
	}
	if vdso == nil {
		t.Fatal("sleep maps no vDSO")
	}
	gone := proc.NewTracker("/nonexistent", nil) // procfs unreadable: gone before it could be read
	defer gone.Close()
	at := time.Now()
	gone.Exec(pid, at, nil)
	for _, tt := range []struct {
		name    string
		tracker *proc.Tracker
		exit    *sampler.ProcEvent
	}{
		{"live", live, nil},
		{"exited", gone, &sampler.ProcEvent{PID: pid, Exit: true, Time: at.Add(time.Millisecond), Maps: []sampler.VMA{sampler.VMA(*vdso)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{Frequency: 99, Tracker: tt.tracker, NoLeafRecovery: true})
			c.Add(&sampler.Record{PID: pid, TID: pid, UserStack: []uint64{vdso.Start + off}})
			if tt.exit != nil {
				c.ProcEvent(*tt.exit)
			}
			prof := c.Build(time.Now())
			if len(prof.Samples) != 1 || len(prof.Samples[0].Frames) == 0 {
				t.Fatalf("profile %+v", prof.Samples)
			}
			f := prof.Samples[0].Frames[0]
			if f.Function != "clock_gettime" || f.Mapping == nil || f.Mapping.Path != "[vdso]" || f.Mapping.BuildID == "" {
				t.Errorf("vDSO frame %+v, mapping %+v: want clock_gettime with the vDSO's build ID", f, f.Mapping)
			}
		})
	}
}
