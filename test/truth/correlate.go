package truth

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Span is one span a workload ran, as it recorded it.
type Span struct {
	TID         int
	Trace, Span string
	// Start..End encloses the time the thread carried the span's ids;
	// Held..Released lies inside that time. Workloads that record one
	// window give both the same.
	Start, End     uint64
	Held, Released uint64
	Function       string
	// Unlocked, when not 0, ends the time from Start in which the span's
	// goroutine was bound to no thread (a new goroutine before it locks
	// its thread, or one never locked): a sample of the span then is its,
	// on any thread. TID is the thread it ran on after.
	Unlocked uint64
}

// ReadSpans reads a workload's ground truth, by thread id.
func ReadSpans(path string) (map[int][]Span, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[int][]Span{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		var unlocked uint64
		if len(p) == 10 {
			// The Go service leads with the goroutine id and ends with
			// its inner window and the end of its unlocked time.
			unlocked, _ = strconv.ParseUint(p[9], 10, 64)
			p = p[1:9]
		}
		if len(p) != 6 && len(p) != 8 {
			return nil, fmt.Errorf("bad truth line %q", sc.Text())
		}
		tid, _ := strconv.Atoi(p[0])
		start, _ := strconv.ParseUint(p[3], 10, 64)
		end, _ := strconv.ParseUint(p[4], 10, 64)
		held, released := start, end
		if len(p) == 8 {
			held, _ = strconv.ParseUint(p[6], 10, 64)
			released, _ = strconv.ParseUint(p[7], 10, 64)
		}
		out[tid] = append(out[tid], Span{tid, p[1], p[2], start, end, held, released, p[5], unlocked})
	}
	return out, sc.Err()
}

// Correlation is what the acceptance criteria measure.
type Correlation struct {
	InSpan, InSpanRight     int // samples well inside a span window; those with its ids
	Linked, LinkedRight     int // samples with a link; those whose link is the span at that time
	LinkedOutside           int // linked samples outside every window of their span by more than 50µs
	LinkedUnlocked          int // right links taken on another thread while their goroutine had none (Span.Unlocked)
	FunctionRight, CheckedF int
	// Time ranges of the samples and of the spans, to tell a recording
	// that missed the workload from one that missed its spans' ids.
	SamplesFrom, SamplesTo, SpansFrom, SpansTo uint64
}

// Recall is the share of in-span samples carrying their span's ids.
func (c Correlation) Recall() float64 { return Pct(c.InSpanRight, c.InSpan) / 100 }

// Precision is the share of linked samples whose link is right.
func (c Correlation) Precision() float64 { return Pct(c.LinkedRight, c.Linked) / 100 }

// Ranges describes the sampled and the span time ranges, relative to the
// first span's start.
func (c Correlation) Ranges() string {
	rel := func(ts uint64) string { return time.Duration(int64(ts - c.SpansFrom)).String() }
	if c.SamplesTo == 0 {
		return fmt.Sprintf("no samples; spans over %s", rel(c.SpansTo))
	}
	return fmt.Sprintf("samples from %s to %s, spans from 0s to %s", rel(c.SamplesFrom), rel(c.SamplesTo), rel(c.SpansTo))
}

// MeasureCorrelation compares samples with the ground truth. A sample is
// in a span when it lies in the span's inner window (held..released), 50µs
// clear of its ends; a linked sample is right when it lies in its span's
// outer window (start..end) within 50µs. Spans that began before the first
// sample are left out: a writer that publishes through the uprobe hook told
// the kernel about them before spanprof was listening.
func MeasureCorrelation(samples []Sample, truth map[int][]Span) Correlation {
	var c Correlation
	first := uint64(1<<64 - 1)
	for _, s := range samples {
		for _, ts := range s.Times {
			first = min(first, ts)
			c.SamplesTo = max(c.SamplesTo, ts)
		}
	}
	c.SamplesFrom, c.SpansFrom = first, 1<<64-1
	for _, spans := range truth {
		for _, sp := range spans {
			c.SpansFrom, c.SpansTo = min(c.SpansFrom, sp.Start), max(c.SpansTo, sp.End)
		}
	}
	for _, s := range samples {
		tid, _ := strconv.Atoi(s.Attrs["thread.id"])
		spans := truth[tid]
		for _, ts := range s.Times {
			// The span whose inner window holds the sample, 50µs clear
			// of its ends.
			var at *Span
			for i := range spans {
				if ts >= spans[i].Held+uint64(margin) && ts+uint64(margin) <= spans[i].Released {
					at = &spans[i]
					break
				}
			}
			if at != nil && at.Start > first {
				c.InSpan++
				if s.Trace == at.Trace && s.Span == at.Span {
					c.InSpanRight++
				} else if debugCorrelation {
					fmt.Printf("miss: tid %d +%dus from start, -%dus to end, link %q, frames %v\n", tid, (ts-at.Start)/1000, (at.End-ts)/1000, s.Span, s.Frames)
				}
				c.CheckedF++
				if len(s.Frames) > 0 && ContainsFrame(s.Frames, at.Function) {
					c.FunctionRight++
				} else if debugCorrelation {
					fmt.Printf("function miss: want %s, frames %v\n", at.Function, s.Frames)
				}
			}
			if s.Trace != "" {
				c.Linked++
				// Right: the thread was in the linked span at that time,
				// within the 50µs the windows are measured to (at a
				// boundary two consecutive spans both qualify; a span may
				// have several windows, as a parent has around its child).
				// Outside: none of them holds the sample.
				if right, own := linkedRight(truth, tid, s, ts); right {
					c.LinkedRight++
					if !own {
						c.LinkedUnlocked++
					}
				} else {
					c.LinkedOutside++
				}
			}
		}
	}
	return c
}

var debugCorrelation = os.Getenv("SPANPROF_DEBUG_CORRELATION") != ""

// margin is how close to a span's window a sample must lie to count as in
// it (or clear of its ends, for the inner window): what the windows are
// measured to.
const margin = int64(50 * time.Microsecond)

// linkedRight reports whether a window of s's linked span, among the
// spans of s's thread (tid), holds ts within margin; or the start of a
// window on another thread, while that span's goroutine was bound to no
// thread (Span.Unlocked). own says which: a window of s's thread.
func linkedRight(truth map[int][]Span, tid int, s Sample, ts uint64) (right, own bool) {
	for _, sp := range truth[tid] {
		if sp.Trace == s.Trace && sp.Span == s.Span && abs64(outside(ts, sp)) <= margin {
			return true, true
		}
	}
	for _, spans := range truth {
		for _, sp := range spans {
			if sp.Unlocked != 0 && sp.Trace == s.Trace && sp.Span == s.Span &&
				ts+uint64(margin) >= sp.Start && ts <= sp.Unlocked+uint64(margin) {
				return true, false
			}
		}
	}
	return false, false
}

// DescribeWrong says, for up to max linked samples whose link is not the
// span their thread ran at that time (within 50µs), where that span was:
// how far the sample lies from its nearest window on the sample's thread,
// or on which other thread it ran, or that no span has those ids. A
// failing test prints it, so that a rare miss (under qemu, say) can be
// told apart after the run: a clock off by more than the margin, a
// goroutine that carried its labels onto a thread the truth does not name
// it on, or ids that no span had.
func DescribeWrong(samples []Sample, truth map[int][]Span, max int) string {
	var b strings.Builder
	n := 0
	for _, s := range samples {
		if s.Trace == "" {
			continue
		}
		tid, _ := strconv.Atoi(s.Attrs["thread.id"])
		for _, ts := range s.Times {
			if n == max {
				return b.String()
			}
			if right, _ := linkedRight(truth, tid, s, ts); right {
				continue
			}
			best, found := int64(1<<63-1), false
			for _, sp := range truth[tid] {
				if sp.Trace == s.Trace && sp.Span == s.Span {
					found = true
					if d := outside(ts, sp); abs64(d) < abs64(best) {
						best = d
					}
				}
			}
			n++
			fmt.Fprintf(&b, "[tid %d, span %s: ", tid, s.Span)
			if found {
				fmt.Fprintf(&b, "%+dµs from its nearest window on this thread", best/1000)
			} else if other, d, ok := elsewhere(truth, s, ts); ok {
				fmt.Fprintf(&b, "not on this thread; on tid %d, %+dµs from its window there", other, d/1000)
			} else {
				b.WriteString("no span has these ids")
			}
			fmt.Fprintf(&b, "; frames %v] ", s.Frames)
		}
	}
	return b.String()
}

// outside is how far ts lies before (negative) or after sp's start..end,
// 0 inside it.
func outside(ts uint64, sp Span) int64 {
	switch {
	case ts < sp.Start:
		return -int64(sp.Start - ts)
	case ts > sp.End:
		return int64(ts - sp.End)
	}
	return 0
}

// elsewhere finds the thread, other than the sample's, whose window of the
// sample's span lies nearest ts.
func elsewhere(truth map[int][]Span, s Sample, ts uint64) (tid int, d int64, ok bool) {
	d = 1<<63 - 1
	for t, spans := range truth {
		for _, sp := range spans {
			if sp.Trace == s.Trace && sp.Span == s.Span {
				if o := outside(ts, sp); abs64(o) < abs64(d) {
					tid, d, ok = t, o, true
				}
			}
		}
	}
	return tid, d, ok
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
