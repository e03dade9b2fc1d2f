package sampler

import (
	"errors"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// past is a deadline that has passed: ReadInto returns what the ring
// holds without waiting.
var past = time.Unix(1, 0)

// Run reads the ring buffer until Stop has detached the programs and the
// ring is empty, or until Close. Records that do not fit the queue are
// dropped and counted, never block the reader.
//
// Run never blocks in a system call: it reads the ring without waiting
// and waits in the Go netpoller (ringWait). A goroutine blocked in
// epoll_wait kept a P in a system call, which kept the runtime's sysmon
// thread polling every 20 µs to 10 ms and retaking that P: hundreds of
// thread wake-ups a second, about half of record's CPU while it samples.
func (s *Sampler) Run() {
	defer close(s.events)
	var rec ringbuf.Record
	for {
		// Read after the flag: once Stop set it, this pass reads the last
		// records the programs wrote.
		last := s.detached.Load()
		if !s.drain(&rec) || last {
			s.releaseHeld()
			return
		}
		s.ring.wait(pollInterval, s.ready)
	}
}

// ready is what ends a wait: records to read, or Stop.
func (s *Sampler) ready() bool {
	if s.detached.Load() {
		return true
	}
	s.readerMu.Lock()
	defer s.readerMu.Unlock()
	return s.readerClosed || s.reader.AvailableBytes() > 0
}

// maxBatch bounds one read of the ring, and so the memory it holds and the
// delay before its first record is handed on; the ring is read again at
// once after a full one.
const maxBatch = 4096

// drain decodes what the ring holds now, then queues it in ring order. It
// returns false once the reader is closed.
//
// The whole read is decoded before any of it is handed on, so that an
// exec's process is read from /proc only when nothing later of the pid (an
// exec, an exit, a fork) was in the ring: such a read would show what came
// after.
// Where the kernel captures mappings at exit, execs do not wake the reader
// (bpf/sampler.bpf.c exec_wakeup), so a short-lived process is usually gone
// by the next poll and costs no /proc read at all.
func (s *Sampler) drain(rec *ringbuf.Record) bool {
	s.reader.SetDeadline(past)
	for {
		n, open := s.drainBatch(rec)
		if !open || n < maxBatch {
			return open
		}
	}
}

// drainBatch decodes up to maxBatch records and queues them. It returns
// how many it read, and false once the reader is closed.
func (s *Sampler) drainBatch(rec *ringbuf.Record) (int, bool) {
	open := true
	batch := s.batch[:0]
read:
	for len(batch) < maxBatch {
		if err := s.reader.ReadInto(rec); err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, ringbuf.ErrFlushed):
				// the ring is empty
			case errors.Is(err, ringbuf.ErrClosed):
				open = false
			default:
				s.log.Warn("read ring buffer", "error", err)
			}
			break read
		}
		r, pe, err := s.dec.decode(rec.RawSample)
		if err != nil {
			s.decodeDrops.Add(1)
			continue
		}
		if pe != nil && !pe.LinkMap {
			// A link-map change leaves the process what it was: an
			// exec before it is still read from /proc.
			s.lastProc[pe.PID] = len(batch)
		}
		batch = append(batch, Event{Sample: r, Proc: pe})
	}
	for i := range batch {
		ev := &batch[i]
		s.order(ev.Sample, ev.Proc, ev.Proc != nil && s.lastProc[ev.Proc.PID] > i)
		*ev = Event{}
	}
	clear(s.lastProc)
	s.batch = batch[:0]
	return len(batch), open
}

// order hands one decoded record on, in ring order but for one case: a
// sample taken inside an exec in the new image (its registers set by
// start_thread) before the exec tracepoint comes before the exec event in
// the ring, yet ran in the image that event tells of. It is held until the
// event of the same exec (the same mm) and handed on right after it, so the
// consumer resolves it against that image. A held sample whose exec event
// never comes (lost, counted as lost_proc_events) goes before the pid's
// next event, or at the end.
func (s *Sampler) order(r *Record, pe *ProcEvent, superseded bool) {
	switch {
	case pe != nil && pe.LinkMap:
		// Of the process as it is, whatever is held for an exec.
		s.queue(nil, pe, false)
	case r != nil:
		if r.newImage && s.execMM[r.PID] != r.execMM {
			s.held[r.PID] = append(s.held[r.PID], r)
			return
		}
		s.queue(r, nil, false)
	case !pe.Exit && !pe.Fork: // an exec
		held := s.held[pe.PID]
		delete(s.held, pe.PID)
		for _, h := range held {
			if h.execMM != pe.execMM {
				s.queue(h, nil, false)
			}
		}
		s.queue(nil, pe, superseded)
		s.execMM[pe.PID] = pe.execMM
		for _, h := range held {
			if h.execMM == pe.execMM {
				s.queue(h, nil, false)
			}
		}
	default: // an exit, its capture, or a fork: another process next
		for _, h := range s.held[pe.PID] {
			s.queue(h, nil, false)
		}
		delete(s.held, pe.PID)
		if pe.Fork || pe.Exit && pe.Maps == nil {
			delete(s.execMM, pe.PID)
		}
		s.queue(nil, pe, superseded)
	}
}

// releaseHeld hands on the samples still held for an exec event at the
// end of the stream.
func (s *Sampler) releaseHeld() {
	for pid, held := range s.held {
		for _, h := range held {
			s.queue(h, nil, false)
		}
		delete(s.held, pid)
	}
}

// queue hands one decoded record on, in ring order. An exec's process is
// read first, while it may still live, unless superseded: a later event of
// the pid is queued behind it. A full queue drops and counts the record: a
// sample as lost_queue_full, a process event as
// lost_proc_events_queue_full, its read released.
func (s *Sampler) queue(r *Record, pe *ProcEvent, superseded bool) {
	ev := Event{Sample: r}
	if pe != nil {
		if !pe.Exit && !pe.Fork && !pe.LinkMap && s.exec != nil {
			if superseded {
				pe.Read = s.exec.PlaceExec(pe.PID, pe.Time, pe.Image)
			} else {
				pe.Read = s.exec.ReadExec(pe.PID, pe.Time, pe.Image)
			}
		}
		ev = Event{Proc: pe}
	}
	select {
	case s.events <- ev:
	default:
		if pe == nil {
			s.queueDrops.Add(1)
			return
		}
		s.procDrops.Add(1)
		if pe.Read != nil {
			pe.Read.Discard()
		}
	}
}

// Stop detaches the programs so no new samples arrive, and wakes Run,
// which ends once it has read what the ring still holds.
func (s *Sampler) Stop() {
	for _, fd := range s.perf {
		_ = unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
	s.mu.Lock()
	for _, l := range s.links {
		_ = l.Close()
	}
	s.links = nil
	s.mu.Unlock()
	s.detached.Store(true)
	s.ring.wake()
}

// ringWait waits until the ring buffer has records, through the Go
// netpoller: a non-blocking duplicate of the ring buffer's descriptor is
// registered there like a socket, so a waiting reader parks its goroutine
// instead of a thread. The kernel's wake-ups (the programs force one when
// the ring holds 1 MiB) make the descriptor readable; otherwise the
// deadline ends the wait.
type ringWait struct {
	f  *os.File // nil: the descriptor could not be registered; sleep instead
	rc syscall.RawConn
}

// fallbackPoll is the sleep between reads when the netpoller cannot watch
// the ring: short, since the kernel's wake-ups are not seen then.
const fallbackPoll = 10 * time.Millisecond

func newRingWait(fd int, log *slog.Logger) *ringWait {
	w := &ringWait{}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		log.Warn("ring buffer not watched by the netpoller; polling", "error", err)
		return w
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		_ = unix.Close(dup)
		log.Warn("ring buffer not watched by the netpoller; polling", "error", err)
		return w
	}
	// NewFile registers a non-blocking descriptor with the netpoller; only
	// then does it accept deadlines.
	f := os.NewFile(uintptr(dup), "ringbuf")
	rc, err := f.SyscallConn()
	if err == nil {
		err = f.SetReadDeadline(time.Time{})
	}
	if err != nil {
		_ = f.Close()
		log.Warn("ring buffer not watched by the netpoller; polling", "error", err)
		return w
	}
	w.f, w.rc = f, rc
	return w
}

// wait returns once ready holds, the kernel wakes the ring, d has passed,
// or wake is called.
func (w *ringWait) wait(d time.Duration, ready func() bool) {
	if w == nil || w.f == nil {
		time.Sleep(min(d, fallbackPoll))
		return
	}
	_ = w.f.SetReadDeadline(time.Now().Add(d))
	// Read calls ready and, while it is false, parks until the descriptor
	// turns readable or the deadline passes; the error says which, and
	// either way the caller reads the ring next.
	_ = w.rc.Read(func(uintptr) bool { return ready() })
}

// wake ends a wait now (the waiter's ready must already hold, or it waits
// again).
func (w *ringWait) wake() {
	if w != nil && w.f != nil {
		_ = w.f.SetReadDeadline(past)
	}
}

func (w *ringWait) close() {
	if w != nil && w.f != nil {
		_ = w.f.Close()
	}
}
