package sampler

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/testutil"
)

// trackerExec is the tracker as the reader calls it at an exec (the
// pipeline's execReader, which this package cannot import).
type trackerExec struct{ t *proc.Tracker }

func (e trackerExec) ReadExec(pid uint32, at time.Time, img *ExecImage) ExecRead {
	return e.t.ReadExec(pid, at, (*proc.Image)(img))
}

func (e trackerExec) PlaceExec(pid uint32, at time.Time, img *ExecImage) ExecRead {
	return e.t.PlaceExec(pid, at, (*proc.Image)(img))
}

// execCalls records which of the tracker's calls the reader made per pid.
type execCalls struct {
	trackerExec
	mu           sync.Mutex
	read, placed map[uint32]int
}

func (c *execCalls) ReadExec(pid uint32, at time.Time, img *ExecImage) ExecRead {
	c.mu.Lock()
	c.read[pid]++
	c.mu.Unlock()
	return c.trackerExec.ReadExec(pid, at, img)
}

func (c *execCalls) PlaceExec(pid uint32, at time.Time, img *ExecImage) ExecRead {
	c.mu.Lock()
	c.placed[pid]++
	c.mu.Unlock()
	return c.trackerExec.PlaceExec(pid, at, img)
}

// TestShortLivedExecsWaitForThePoll: where the kernel captures mappings at
// exit, an exec does not wake the reader, so a process that lives a
// millisecond is gone when the reader gets to its exec, with its exit in
// the same read of the ring: it is placed from the exec, its /proc not
// read (which would cost a read and could show another process). A
// process that execs again before the reader comes has its first image
// placed the same way, and the read goes to its last exec.
func TestShortLivedExecsWaitForThePoll(t *testing.T) {
	testutil.RequireRoot(t)
	tr := proc.NewTracker("/proc", nil)
	defer tr.Close()
	calls := &execCalls{trackerExec: trackerExec{tr}, read: map[uint32]int{}, placed: map[uint32]int{}}
	s := startSampler(t, Options{Frequency: 99, Exec: calls})
	if s.exit == nil {
		t.Skip("the kernel has no exit-time mapping capture: execs wake the reader")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range s.Events() {
			if e.Proc != nil && e.Proc.Read != nil {
				e.Proc.Read.Discard()
			}
		}
	}()
	var short []uint32
	for range 50 {
		cmd := exec.Command("/bin/true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		short = append(short, uint32(cmd.Process.Pid))
	}
	// sh execs bash at once, and bash spins a while: the sh image is
	// superseded in the ring by the second exec.
	chain := exec.Command("/bin/sh", "-c", `exec /usr/bin/bash -c 'for ((i=0;i<200000;i++)); do :; done'`)
	if err := chain.Start(); err != nil {
		t.Fatal(err)
	}
	cpid := uint32(chain.Process.Pid)
	_ = chain.Wait()
	s.Stop()
	<-done

	calls.mu.Lock()
	defer calls.mu.Unlock()
	var placed, read int
	for _, pid := range short {
		placed += calls.placed[pid]
		read += calls.read[pid]
	}
	t.Logf("%d short-lived children: %d execs placed from the exec, %d read from /proc; the exec chain: %d placed, %d read",
		len(short), placed, read, calls.placed[cpid], calls.read[cpid])
	if placed+read != len(short) {
		t.Fatalf("%d exec events handed to the tracker for %d children", placed+read, len(short))
	}
	// A child whose exit falls after a poll that found its exec is read
	// (and found gone): a millisecond in 200.
	if placed < len(short)*8/10 {
		t.Errorf("only %d of %d short-lived children placed without a /proc read: execs still wake the reader", placed, len(short))
	}
	if calls.placed[cpid]+calls.read[cpid] != 2 {
		t.Fatalf("%d exec events of the chain, want 2 (sh, bash)", calls.placed[cpid]+calls.read[cpid])
	}
	if calls.placed[cpid] < 1 {
		t.Errorf("the chain's first exec was read from /proc, where the process showed its next image")
	}
}

// TestForkEvents: every new process (not a thread) comes as a fork event
// naming its parent, ahead of its samples, so that a pid taken by a fork
// after its process's exit is told from that process without /proc: bash
// forked by this test, and a subshell bash forks and that never execs.
func TestForkEvents(t *testing.T) {
	testutil.RequireRoot(t)
	stop := recordEvents(startSampler(t, Options{Frequency: 999}))
	cmd := exec.Command("/usr/bin/bash", "-c", `( for ((i=0;i<100000;i++)); do :; done ); :`)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	events := stop()

	bash := uint32(cmd.Process.Pid)
	forked := map[uint32]int{} // pid -> index of its fork event
	var sub uint32
	for i, e := range events {
		if p := e.Proc; p != nil && p.Fork {
			if p.PID == bash && p.Parent != uint32(os.Getpid()) {
				t.Errorf("bash's fork event names parent %d, want this test (%d)", p.Parent, os.Getpid())
			}
			if p.Parent == bash {
				sub = p.PID
			}
			forked[p.PID] = i
		}
	}
	if _, ok := forked[bash]; !ok {
		t.Fatalf("no fork event of bash (pid %d) among %d events", bash, len(events))
	}
	if sub == 0 {
		t.Fatalf("no fork event naming bash (pid %d) as the parent", bash)
	}
	var subSamples int
	for i, e := range events {
		if r := e.Sample; r != nil && r.PID == sub {
			subSamples++
			if i < forked[sub] {
				t.Errorf("sample %d of the subshell (pid %d) before its fork event %d", i, sub, forked[sub])
			}
		}
	}
	t.Logf("%d events; fork events of bash %d and its subshell %d; %d samples of the subshell", len(events), bash, sub, subSamples)
	if subSamples == 0 {
		t.Errorf("no sample of the subshell: its order against the fork event is unchecked")
	}
}

// TestNewImageSamplesFollowTheirExec: a sample taken inside an exec in the
// new image before the exec tracepoint comes before the exec event in the
// ring; the reader hands it on after the event of the same exec, so it is
// resolved against the image it ran in. One taken after the tracepoint,
// still inside the exec, stays where it is; one whose exec event was lost
// goes before the pid's next event.
func TestNewImageSamplesFollowTheirExec(t *testing.T) {
	s := &Sampler{events: make(chan Event, 64), held: map[uint32][]*Record{}, execMM: map[uint32]uint32{}}
	sample := func(pid uint32, v int64, mm uint32) *Record {
		return &Record{PID: pid, Value: v, newImage: mm != 0, execMM: mm}
	}
	in := []Event{
		{Sample: sample(7, 1, 0)},   // the old image
		{Sample: sample(7, 2, 0xa)}, // the new image, before its event
		{Sample: sample(8, 3, 0)},   // another process
		{Sample: sample(7, 4, 0xa)}, // the new image, before its event
		{Proc: &ProcEvent{PID: 7, execMM: 0xa}},
		{Sample: sample(7, 5, 0xa)}, // after the tracepoint, still in the exec
		{Sample: sample(7, 6, 0)},   // the new image, in user space
		{Sample: sample(7, 7, 0xb)}, // a second exec whose event was lost
		{Proc: &ProcEvent{PID: 7, Exit: true}},
		{Sample: sample(9, 8, 0xc)}, // its exec event never comes
	}
	for _, e := range in {
		s.order(e.Sample, e.Proc, false)
	}
	s.releaseHeld()
	close(s.events)
	var got []string
	for e := range s.events {
		switch {
		case e.Sample != nil:
			got = append(got, fmt.Sprint(e.Sample.Value))
		case e.Proc.Exit:
			got = append(got, "exit")
		default:
			got = append(got, "exec")
		}
	}
	want := []string{"1", "3", "exec", "2", "4", "5", "6", "7", "exit", "8"}
	if !slices.Equal(got, want) {
		t.Errorf("handed on %v, want %v", got, want)
	}
}
