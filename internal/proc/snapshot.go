package proc

import (
	"bytes"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/internal/tracectx"
)

// Snapshot is what one read of /proc/PID saw that the tracker does not
// keep, for the trace-context scanner: every line of maps (the scanner
// needs the data segments and named anonymous mappings too), the
// environment variables the scanner reads, and the executable's identity.
// A new process is then read once, not once by the tracker and again by
// the scanner right after: under process churn those reads were a fifth
// of the agent's work.
type Snapshot struct {
	PID uint32
	// At is when the read was made.
	At time.Time
	// Maps is the text of /proc/PID/maps.
	Maps []byte
	// Environ holds the NUL-terminated OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES entries of /proc/PID/environ, in their
	// order there; nil with EnvErr when it could not be read.
	Environ []byte
	EnvErr  error
	// Exe is the stat of /proc/PID/exe (the file, followed); ExeErr says
	// why there is none.
	Exe    unix.Stat_t
	ExeErr error
}

// snapshotTTL is how long a snapshot waits for the scanner. The scan of
// a new process is queued as its exec or first sample is handled, within
// milliseconds of the read; an older snapshot would show the process as
// it was before its loader or its SDK mapped what the scanner looks for,
// so the scanner reads again instead.
const snapshotTTL = 250 * time.Millisecond

// snapshots holds the latest snapshot of each pid read in the last
// snapshotTTL, in the order they were taken, so that expired ones are
// dropped from the front: under churn, processes gone before their scan
// leave theirs unclaimed.
type snapshots struct {
	byPID map[uint32]*Snapshot
	fifo  []*Snapshot
}

// put keeps s as its pid's snapshot and drops the expired ones.
func (ss *snapshots) put(s *Snapshot) {
	if ss.byPID == nil {
		ss.byPID = map[uint32]*Snapshot{}
	}
	ss.expire(s.At)
	ss.byPID[s.PID] = s
	ss.fifo = append(ss.fifo, s)
}

// expire drops the snapshots older than snapshotTTL at now.
func (ss *snapshots) expire(now time.Time) {
	n := 0
	for n < len(ss.fifo) && now.Sub(ss.fifo[n].At) > snapshotTTL {
		if old := ss.fifo[n]; ss.byPID[old.PID] == old {
			delete(ss.byPID, old.PID)
		}
		ss.fifo[n] = nil
		n++
	}
	ss.fifo = ss.fifo[n:]
	if len(ss.fifo) == 0 {
		ss.fifo = nil // let a slice grown by a burst go
	}
}

// take hands over pid's snapshot when it is fresh, and forgets it.
func (ss *snapshots) take(pid uint32, now time.Time) *Snapshot {
	ss.expire(now)
	s := ss.byPID[pid]
	delete(ss.byPID, pid)
	return s
}

// Snapshot hands over the snapshot of pid's last /proc read when it is
// less than snapshotTTL old; a pid the tracker never saw is read now (the
// read its first sample would make anyway), so the scanner and the
// tracker share it. Nil when pid was read longer ago or could not be
// read: the scanner then reads /proc itself. Each snapshot is handed over
// once.
func (t *Tracker) Snapshot(pid uint32) *Snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.procs[pid]; !ok {
		t.get(pid)
	}
	return t.snaps.take(pid, time.Now())
}

// snapshot records what read saw of pid: the maps text b (t.buf's, copied)
// and the rest from d. Callers hold t.mu.
func (t *Tracker) snapshot(pid uint32, d procDir, maps []byte) *Snapshot {
	s := &Snapshot{PID: pid, At: time.Now(), Maps: bytes.Clone(maps)}
	if err := unix.Fstatat(d.fd, "exe", &s.Exe, 0); err != nil {
		s.ExeErr = err
	}
	return s
}

// otelEnviron returns the entries of environ text whose names the
// scanner reads, each NUL-terminated, in their order.
func otelEnviron(b []byte) []byte {
	out := []byte{}
	for len(b) > 0 {
		var kv []byte
		kv, b, _ = bytes.Cut(b, []byte{0})
		if bytes.HasPrefix(kv, []byte("OTEL_SERVICE_NAME=")) || bytes.HasPrefix(kv, []byte("OTEL_RESOURCE_ATTRIBUTES=")) {
			out = append(append(out, kv...), 0)
		}
	}
	return out
}

// ProcRead is the snapshot of pid (Snapshot) as the trace-context scan
// takes it, or nil.
func (t *Tracker) ProcRead(pid uint32) *tracectx.ProcRead {
	snap := t.Snapshot(pid)
	if snap == nil {
		return nil
	}
	pr := &tracectx.ProcRead{Maps: snap.Maps, Environ: snap.Environ, EnvErr: snap.EnvErr, ExeErr: snap.ExeErr}
	if snap.ExeErr == nil {
		pr.Exe = &snap.Exe
	}
	return pr
}
