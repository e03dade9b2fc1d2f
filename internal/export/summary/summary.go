// Package summary writes the short text report `spanprof record` prints
// when no output file is given: what was sampled, what was lost, where the
// time went and how much of it was inside spans.
package summary

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
)

// fnStat is one function's self and total weight.
type fnStat struct {
	name        string
	self, total int64
}

// procStat is one process's weight, split by span link.
type procStat struct {
	pid                     uint32
	on, onLinked            int64
	offNanos, offNanosInLnk int64
	offEvents               int
}

// Write writes the summary of p, listing the top functions (at most top;
// 10 when top <= 0) by self and by total weight.
func Write(w io.Writer, p *profile.Profile, top int) error {
	if top <= 0 {
		top = 10
	}
	agg := profile.NewAggregate(p)
	on, off := functionStats(agg, profile.OnCPU), functionStats(agg, profile.OffCPU)
	procs := processStats(agg)

	bw := bufio.NewWriter(w)
	writeHeader(bw, p, procs)
	if len(on) > 0 {
		writeTop(bw, "on-CPU samples", on, top, count)
	}
	if len(off) > 0 {
		writeTop(bw, "off-CPU time", off, top, duration)
	}
	if len(procs) > 0 {
		writeProcesses(bw, p, procs, maxProcesses)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

func writeHeader(w io.Writer, p *profile.Profile, procs []procStat) {
	var on, off int64
	var offEvents int
	for _, ps := range procs {
		on += ps.on
		off += ps.offNanos
		offEvents += ps.offEvents
	}
	fmt.Fprintf(w, "spanprof: %s", p.End.Sub(p.Start).Round(time.Millisecond))
	if !p.Start.IsZero() {
		fmt.Fprintf(w, " from %s", p.Start.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, ", %d Hz, %s\n", p.Frequency, plural(int64(len(procs)), "process", "processes"))
	fmt.Fprintf(w, "on-CPU: %s (%s CPU)", plural(on, "sample", "samples"), round(time.Duration(on*p.PeriodNanos())))
	if offEvents > 0 {
		fmt.Fprintf(w, "; off-CPU: %s, %s blocked", plural(int64(offEvents), "event", "events"), round(time.Duration(off)))
	}
	fmt.Fprintln(w)
	var lost []string
	for _, k := range slices.Sorted(maps.Keys(p.Lost)) {
		if p.Lost[k] > 0 {
			lost = append(lost, fmt.Sprintf("%s=%d", k, p.Lost[k]))
		}
	}
	if len(lost) == 0 {
		lost = []string{"none"}
	}
	fmt.Fprintf(w, "lost: %s\n", strings.Join(lost, " "))
}

// functionStats returns per-function weights of kind k. A function counts
// once per stack for total, so recursion does not inflate it.
func functionStats(agg *profile.Aggregate, k profile.Kind) []fnStat {
	idx := map[string]int{}
	var stats []fnStat
	seen := map[string]bool{}
	for i := range agg.Groups {
		g := &agg.Groups[i]
		if g.Kind != k {
			continue
		}
		clear(seen)
		for j, id := range agg.Stacks[g.Stack] {
			name := agg.Frames[id].DisplayName()
			n, ok := idx[name]
			if !ok {
				n = len(stats)
				stats = append(stats, fnStat{name: name})
				idx[name] = n
			}
			if j == 0 {
				stats[n].self += g.Total
			}
			if !seen[name] {
				stats[n].total += g.Total
				seen[name] = true
			}
		}
	}
	return stats
}

func processStats(agg *profile.Aggregate) []procStat {
	var procs []procStat
	for i := range agg.Groups {
		g := &agg.Groups[i]
		if n := len(procs); n == 0 || procs[n-1].pid != g.PID {
			procs = append(procs, procStat{pid: g.PID})
		}
		ps := &procs[len(procs)-1]
		linked := !g.Link.IsZero()
		if g.Kind == profile.OnCPU {
			ps.on += g.Total
			if linked {
				ps.onLinked += g.Total
			}
			continue
		}
		ps.offNanos += g.Total
		ps.offEvents += len(g.Values)
		if linked {
			ps.offNanosInLnk += g.Total
		}
	}
	return procs
}

func count(v int64) string    { return fmt.Sprint(v) }
func duration(v int64) string { return time.Duration(v).Round(time.Microsecond).String() }

func writeTop(w io.Writer, what string, stats []fnStat, top int, format func(int64) string) {
	var sum int64
	for _, s := range stats {
		sum += s.self // every stack has one leaf, so self weights add up to the whole
	}
	for _, by := range []struct {
		name string
		key  func(fnStat) int64
	}{{"self", func(s fnStat) int64 { return s.self }}, {"total", func(s fnStat) int64 { return s.total }}} {
		slices.SortStableFunc(stats, func(a, b fnStat) int {
			if d := by.key(b) - by.key(a); d != 0 {
				if d > 0 {
					return 1
				}
				return -1
			}
			return strings.Compare(a.name, b.name)
		})
		fmt.Fprintf(w, "\ntop %d functions by %s %s\n", min(top, len(stats)), by.name, what)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "self\tself%\ttotal\ttotal%\t\tfunction")
		for _, s := range stats[:min(top, len(stats))] {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\t%s\n", format(s.self), pct(s.self, sum), format(s.total), pct(s.total, sum), s.name)
		}
		tw.Flush()
	}
}

// maxProcesses caps the process table: a machine-wide recording sees
// hundreds, and the busiest are what the table is read for.
const maxProcesses = 20

// writeProcesses writes the busiest processes first (on-CPU samples, then
// off-CPU time), at most limit of them and a line for the rest.
func writeProcesses(w io.Writer, p *profile.Profile, procs []procStat, limit int) {
	procs = slices.Clone(procs)
	slices.SortFunc(procs, func(a, b procStat) int {
		if a.on != b.on {
			return cmp.Compare(b.on, a.on)
		}
		if a.offNanos != b.offNanos {
			return cmp.Compare(b.offNanos, a.offNanos)
		}
		return cmp.Compare(a.pid, b.pid)
	})
	fmt.Fprintln(w, "\nprocesses, busiest first (in span: share of samples or blocked time taken inside a span)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pid\tprocess\tservice\ton-CPU\tin span\toff-CPU\tin span")
	shown := procs[:min(limit, len(procs))]
	defer func() {
		if rest := procs[len(shown):]; len(rest) > 0 {
			var on, off int64
			for _, ps := range rest {
				on, off = on+ps.on, off+ps.offNanos
			}
			line := fmt.Sprintf("… %d more %s: %s", len(rest), plural0(len(rest), "process", "processes"), plural(on, "on-CPU sample", "on-CPU samples"))
			if off > 0 {
				line += fmt.Sprintf(", %s off-CPU", round(time.Duration(off)))
			}
			fmt.Fprintln(w, line)
		}
	}()
	for _, ps := range shown {
		service := ""
		if pr := p.Processes[ps.pid]; pr != nil {
			service = pr.ServiceName
		}
		offCol, offPct := "-", "-"
		if ps.offEvents > 0 {
			offCol, offPct = duration(ps.offNanos), pct(ps.offNanosInLnk, ps.offNanos)
		}
		onPct := "-"
		if ps.on > 0 {
			onPct = pct(ps.onLinked, ps.on)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", ps.pid, p.ProcessName(ps.pid), service, ps.on, onPct, offCol, offPct)
	}
	tw.Flush()
}

func pct(v, of int64) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(v)/float64(of))
}

// plural writes n and the noun that agrees with it.
func plural(n int64, one, many string) string {
	return fmt.Sprintf("%d %s", n, plural0(int(n), one, many))
}

func plural0(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// round keeps three significant digits or so of a total: 1.99999998s is
// 2s, 12.3456ms is 12.35ms.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
