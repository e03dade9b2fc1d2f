package collect

import (
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/sampler"
)

// A short-lived process is often gone before /proc/PID/maps can be read:
// its image is then the executable and the loader placed from its exec
// (proc.Process.Partial), or what was read at the exec, before the loader
// mapped its libraries. The kernel captures its mappings as it exits, and
// that capture follows its samples in the stream. A stack unwound before
// it stops at the first library (no unwind rules for an address in no
// mapping), so such a process's samples whose stacks leave its known
// mappings wait for its exit, and are unwound then, against the image with
// the libraries. The wait is bounded in bytes (maxAwaitBytes); a report,
// an exec or a fork of the pid ends it too, with the image as it is.

// maxAwaitBytes bounds the records waiting for their process's exit.
const maxAwaitBytes = 2 << 20

// awaiting is a sample of an image that awaits its exit capture.
type awaiting struct {
	r *sampler.Record
	p *proc.Process
}

// recordBytes is about what a record holds in memory.
func recordBytes(r *sampler.Record) int {
	return 256 + len(r.StackTop) + 8*(len(r.UserStack)+len(r.KernStack)) + len(r.CtxAttrs)
}

// leavesMappings reports whether a user stack (the ip, then return
// addresses, looked up a byte earlier) has an address in none of p's
// mappings.
func leavesMappings(p *proc.Process, user []uint64) bool {
	for i, a := range user {
		if i > 0 {
			a--
		}
		if p.Find(a) == nil {
			return true
		}
	}
	return false
}

// await keeps r, a sample of p, until its process's exit, when p awaits
// its exit capture and r's stack leaves p's mappings. It reports whether
// it kept r.
func (c *Collector) await(p *proc.Process, r *sampler.Record) bool {
	if !p.AwaitsExit() || !leavesMappings(p, r.UserStack) {
		return false
	}
	n := recordBytes(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.awaitBytes+n > maxAwaitBytes {
		c.stats.ExitAwaitMissed++
		return false
	}
	if c.awaiting == nil {
		c.awaiting = map[uint32][]awaiting{}
	}
	// Held from now, for the interval the sample will be kept in: every
	// report ends the waits before it takes the interval.
	c.hold(p)
	c.awaiting[r.PID] = append(c.awaiting[r.PID], awaiting{r: r, p: p})
	c.awaitBytes += n
	return true
}

// flushAwaiting adds pid's waiting samples, against the tracker's entry for
// the pid when it is still their image (now with what its exit capture
// added), else the image they were taken in. captured: the exit that ends
// the wait brought the kernel's capture of the mappings.
func (c *Collector) flushAwaiting(pid uint32, captured bool) {
	c.mu.Lock()
	list := c.awaiting[pid]
	if len(list) == 0 {
		c.mu.Unlock()
		return
	}
	delete(c.awaiting, pid)
	for _, a := range list {
		c.awaitBytes -= recordBytes(a.r)
	}
	if captured {
		c.stats.ExitAwaited += uint64(len(list))
	} else {
		c.stats.ExitAwaitMissed += uint64(len(list))
	}
	c.mu.Unlock()
	cur := c.opts.Tracker.Current(pid)
	for _, a := range list {
		p := a.p
		if cur != nil && cur.Gen() == p.Gen() {
			p = cur
		}
		c.addTo(p, a.r, false)
	}
}

// flushAllAwaiting ends every wait: a report is being made.
func (c *Collector) flushAllAwaiting() {
	c.mu.Lock()
	pids := make([]uint32, 0, len(c.awaiting))
	for pid := range c.awaiting {
		pids = append(pids, pid)
	}
	c.mu.Unlock()
	for _, pid := range pids {
		c.flushAwaiting(pid, false)
	}
}
