// Package folded writes collapsed stacks ("proc;root;...;leaf count"), the
// input format of Brendan Gregg's flamegraph.pl, speedscope and inferno.
package folded

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spanprof/spanprof/internal/profile"
)

// OffCPUFrame marks off-CPU stacks, right under the process name, so a
// flame graph shows CPU time and blocked time side by side.
const OffCPUFrame = "[off-cpu]"

// Write writes p as collapsed stacks, one line per distinct stack, sorted.
// The first frame is the process name, then the stack from root to leaf;
// inlined functions are frames of their own and unsymbolized frames read
// "module+0xoff".
//
// A line has a single number, so the unit depends on the content: with
// on-CPU samples only it is the sample count; once the profile holds
// off-CPU samples every line is in nanoseconds (on-CPU count × period,
// off-CPU blocked time under OffCPUFrame), which makes the widths
// comparable wall-clock time.
func Write(w io.Writer, p *profile.Profile) error {
	agg := profile.NewAggregate(p)
	nanos := p.HasKind(profile.OffCPU)
	period := p.PeriodNanos()
	totals := map[string]int64{}
	var sb strings.Builder
	for i := range agg.Groups {
		g := &agg.Groups[i]
		v := g.Total
		if nanos && g.Kind == profile.OnCPU {
			v *= period
		}
		sb.Reset()
		sb.WriteString(clean(p.ProcessName(g.PID)))
		if g.Kind == profile.OffCPU {
			sb.WriteString(";" + OffCPUFrame)
		}
		stack := agg.Stacks[g.Stack]
		for j := len(stack) - 1; j >= 0; j-- {
			sb.WriteByte(';')
			sb.WriteString(clean(agg.Frames[stack[j]].DisplayName()))
		}
		totals[sb.String()] += v
	}
	lines := make([]string, 0, len(totals))
	for l, v := range totals {
		if v > 0 {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	bw := bufio.NewWriter(w)
	for _, l := range lines {
		fmt.Fprintf(bw, "%s %d\n", l, totals[l])
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write folded stacks: %w", err)
	}
	return nil
}

// clean keeps a frame name from breaking the line format: ';' separates
// frames and a newline ends the record.
func clean(s string) string {
	if s == "" {
		return "[unknown]"
	}
	return strings.NewReplacer(";", ":", "\n", " ").Replace(s)
}
