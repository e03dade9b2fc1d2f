package proc

import (
	"fmt"
	"time"
)

// ExecRead is a process as read at its exec, by the sampler's reader as it
// decodes the exec event: /proc/PID/maps of a short-lived process is gone
// by the time the consumer reaches the event. It holds references to the
// files it maps until the consumer applies it (ApplyExec) or discards it
// (Discard); it changes nothing in the tracker's table, which only the
// consumer changes, in stream order.
type ExecRead struct {
	t *Tracker
	p *Process
	// synthesized: the process was gone before it could be read, and was
	// placed from its exec image.
	synthesized bool
}

// ReadExec reads pid, whose image changed at time at, from procfs now.
// When it is gone already, img (the exec's image, may be nil) still places
// its executable and dynamic loader; when even that fails the read holds
// an exited process without mappings. It is safe to call from the reader
// while the consumer uses the tracker: only the shared file handles are
// touched, under the tracker's lock.
func (t *Tracker) ReadExec(pid uint32, at time.Time, img *Image) *ExecRead {
	return t.readExec(pid, at, img, true)
}

// PlaceExec is ReadExec for an exec whose process already shows a later
// state in /proc (the reader holds a later exec or the exit of the pid,
// which were in the ring before it got to this one): it is placed from its
// exec image alone, as if gone, since a read would show what came after.
// The mappings an exit captured, if any, follow in the stream.
func (t *Tracker) PlaceExec(pid uint32, at time.Time, img *Image) *ExecRead {
	return t.readExec(pid, at, img, false)
}

func (t *Tracker) readExec(pid uint32, at time.Time, img *Image, live bool) *ExecRead {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &ExecRead{t: t}
	var p *Process
	err := fmt.Errorf("superseded by a later event of the pid")
	if live {
		p, err = t.read(pid)
		if err == nil && p.Exited && len(p.Mappings) == 0 {
			err = fmt.Errorf("exited") // a zombie: its maps are empty
		}
	}
	if err != nil {
		t.log.Debug("read process after exec", "pid", pid, "error", err)
		if p != nil {
			t.release(p)
		}
		var serr error
		if p, serr = t.synthesize(pid, img); serr != nil {
			t.log.Debug("place process from its exec", "pid", pid, "error", serr)
			p = &Process{PID: pid, Exited: true}
		} else {
			r.synthesized = true
		}
	}
	p.readAt = time.Now()
	p.execAt = at
	r.p = p
	return r
}

// Discard releases the read, which will not be applied (its event was
// dropped).
func (r *ExecRead) Discard() {
	if r != nil && r.t != nil {
		r.t.Discard(r)
	}
}

// Discard releases a read that will not be applied (its event was
// dropped).
func (t *Tracker) Discard(r *ExecRead) {
	if r == nil || r.p == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.release(r.p)
	r.p = nil
}

// ApplyExec makes r, read at pid's exec at time at, the pid's entry. The
// entry it replaces is kept while samples hold it (Hold). An
// entry read after at, at the first sight of a sample handled after the
// exec happened, already shows the new image, maybe with more of its
// libraries: it is kept, and r released. A nil r is read now (a source
// that read nothing at decode).
func (t *Tracker) ApplyExec(pid uint32, at time.Time, r *ExecRead) {
	if r == nil {
		r = t.ReadExec(pid, at, nil)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := r.p
	if p == nil {
		return // discarded, or applied already
	}
	r.p = nil
	if t.readAfterExec(pid, at) {
		t.release(p)
		return
	}
	if cur, ok := t.procs[pid]; ok {
		// Live (the image before this exec) or exited (an earlier process
		// of the same pid): samples of either may still be held.
		delete(t.procs, pid)
		t.retire(cur)
	}
	if r.synthesized {
		t.synthesized++
	}
	p.gen = t.newGen()
	t.procs[pid] = p
}

// readAfterExec reports whether pid's entry was read at or after at, the
// time of an exec: it shows the new image already, and is marked as read
// at that exec. Callers hold t.mu.
func (t *Tracker) readAfterExec(pid uint32, at time.Time) bool {
	cur, ok := t.procs[pid]
	if !ok || cur.readAt.IsZero() || cur.readAt.Before(at) {
		return false
	}
	if cur.execAt.IsZero() {
		// A copy: cur may be held.
		np := *cur
		np.execAt = at
		t.procs[pid] = &np
	}
	return true
}
