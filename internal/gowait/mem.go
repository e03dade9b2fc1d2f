package gowait

import (
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Memory is a target process's address space as the sampler reads it.
// The sampler asks for thousands of small ranges per tick (one runtime.g
// each), so reads come in batches: an implementation can serve a batch
// with few system calls.
type Memory interface {
	// ReadAt fills b from address off (io.ReaderAt); a short read is an
	// error.
	ReadAt(b []byte, off int64) (int, error)
	// ReadRanges fills out[i] with len(out[i]) bytes from addrs[i]; ok[i]
	// says whether that range could be read (false: unmapped). An error
	// means none of the batch could be read (the process is gone).
	ReadRanges(addrs []uint64, out [][]byte, ok []bool) error
}

// Tuning of processMemory: ranges closer than mergeGap are read as one
// (copying a few hundred bytes costs less than one more iovec: runtime.g
// structs sit next to each other in their span), up to maxMerged bytes.
const (
	mergeGap  = 512
	maxMerged = 64 << 10
	iovMax    = 1024 // IOV_MAX on Linux
)

// processMemory reads another process's memory with process_vm_readv,
// which needs the same rights as ptrace attach but does not stop the
// target.
type processMemory struct {
	pid int
	// Scratch reused across batches.
	// plans of recent batches: the sampler asks for the same g's tick
	// after tick (and for a few again), so their sorted order and runs
	// are kept rather than recomputed.
	plans  [2]*memPlan
	next   int
	local  []unix.Iovec
	remote []unix.RemoteIovec
}

// memPlan is how one batch of requests is read.
type memPlan struct {
	addrs []uint64
	lens  []int
	order []int // request indexes sorted by address
	runs  []memRun
	arena []byte
}

// memRun is a merged range and the requests it covers; buf points into
// the arena, reused from batch to batch.
type memRun struct {
	addr, size uint64
	buf        []byte
	first      int // index into order
	n          int
	ok         bool
}

func newProcessMemory(pid int) *processMemory { return &processMemory{pid: pid} }

func (p *processMemory) ReadAt(b []byte, off int64) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(len(b))
	remote := []unix.RemoteIovec{{Base: uintptr(off), Len: len(b)}}
	n, err := unix.ProcessVMReadv(p.pid, local, remote, 0)
	if err != nil {
		return n, fmt.Errorf("read %d bytes at %#x of pid %d: %w", len(b), off, p.pid, err)
	}
	if n < len(b) {
		return n, fmt.Errorf("read %d bytes at %#x of pid %d: short read of %d", len(b), off, p.pid, n)
	}
	return n, nil
}

// ReadRanges sorts the requests, merges neighbours into runs, reads the
// runs with as few process_vm_readv calls as IOV_MAX allows, and copies
// each request out of its run. A run that fails is retried request by
// request, so one unmapped range costs only itself.
func (p *processMemory) ReadRanges(addrs []uint64, out [][]byte, ok []bool) error {
	var pl *memPlan
	for _, c := range p.plans {
		if c != nil && c.matches(addrs, out) {
			pl = c
		}
	}
	if pl == nil {
		pl = p.plans[p.next]
		if pl == nil {
			pl = &memPlan{}
			p.plans[p.next] = pl
		}
		p.next = (p.next + 1) % len(p.plans)
		pl.plan(addrs, out)
	}
	for i := range ok {
		ok[i] = false
	}
	for i := range pl.runs {
		pl.runs[i].ok = false
	}
	if err := p.readRuns(pl.runs); err != nil {
		return err
	}
	for ri := range pl.runs {
		r := &pl.runs[ri]
		for _, i := range pl.order[r.first : r.first+r.n] {
			if r.ok {
				copy(out[i], r.buf[addrs[i]-r.addr:])
				ok[i] = true
			} else if r.n > 1 {
				_, err := p.ReadAt(out[i], int64(addrs[i]))
				ok[i] = err == nil
			}
		}
	}
	return nil
}

func (p *memPlan) matches(addrs []uint64, out [][]byte) bool {
	if !slices.Equal(addrs, p.addrs) {
		return false
	}
	for i := range out {
		if len(out[i]) != p.lens[i] {
			return false
		}
	}
	return true
}

// plan sorts the requests and merges neighbours into runs in the arena.
func (p *memPlan) plan(addrs []uint64, out [][]byte) {
	p.addrs = append(p.addrs[:0], addrs...)
	p.lens = p.lens[:0]
	for i := range out {
		p.lens = append(p.lens, len(out[i]))
	}
	p.order = p.order[:0]
	for i := range addrs {
		if len(out[i]) > 0 {
			p.order = append(p.order, i)
		}
	}
	slices.SortFunc(p.order, func(a, b int) int {
		switch {
		case addrs[a] < addrs[b]:
			return -1
		case addrs[a] > addrs[b]:
			return 1
		}
		return 0
	})
	p.runs = p.runs[:0]
	var total uint64
	for k, i := range p.order {
		start, end := addrs[i], addrs[i]+uint64(len(out[i]))
		if n := len(p.runs); n > 0 {
			r := &p.runs[n-1]
			if rend := r.addr + r.size; start <= rend+mergeGap && end-r.addr <= maxMerged {
				if end > rend {
					total += end - rend
					r.size = end - r.addr
				}
				r.n++
				continue
			}
		}
		p.runs = append(p.runs, memRun{addr: start, size: end - start, first: k, n: 1})
		total += end - start
	}
	if uint64(cap(p.arena)) < total {
		p.arena = make([]byte, total)
	}
	var off uint64
	for i := range p.runs {
		r := &p.runs[i]
		r.buf = p.arena[off : off+r.size : off+r.size]
		off += r.size
	}
}

// readRuns reads runs in calls of up to iovMax iovecs. process_vm_readv
// stops at the first range it cannot read and returns the bytes copied
// so far; the runs before it are good, that one failed, and reading
// resumes after it.
func (p *processMemory) readRuns(runs []memRun) error {
	for len(runs) > 0 {
		batch := runs[:min(len(runs), iovMax)]
		p.local, p.remote = p.local[:0], p.remote[:0]
		for i := range batch {
			iov := unix.Iovec{Base: &batch[i].buf[0]}
			iov.SetLen(len(batch[i].buf))
			p.local = append(p.local, iov)
			p.remote = append(p.remote, unix.RemoteIovec{Base: uintptr(batch[i].addr), Len: len(batch[i].buf)})
		}
		n, err := unix.ProcessVMReadv(p.pid, p.local, p.remote, 0)
		if err != nil && !errors.Is(err, unix.EFAULT) {
			return fmt.Errorf("read memory of pid %d: %w", p.pid, err)
		}
		n = max(n, 0)
		done := 0
		for done < len(batch) && n >= len(batch[done].buf) {
			batch[done].ok = true
			n -= len(batch[done].buf)
			done++
		}
		if done < len(batch) {
			done++ // batch[done] is the unreadable one: skip it
		}
		runs = runs[done:]
	}
	return nil
}
