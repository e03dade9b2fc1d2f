package main

import (
	"fmt"
	"slices"
	"strings"
)

// The slowdown of a profiler is taken per round, against the baseline run
// of the same round: rounds on a shared machine differ by more than the
// slowdowns measured, and pairing removes that drift. A figure is then
// reported as the median over rounds with its spread (min..max), so a
// slowdown within the noise shows as a spread that straddles zero.

// pairedSlowdowns returns, by round, f of the profiler's run over f of
// the same round's baseline run, minus one; rounds missing either run are
// left out.
func (b *bench) pairedSlowdowns(name string, f func(slowRow) float64) map[int]float64 {
	base := map[int]float64{}
	for _, r := range b.slow {
		if r.prof == "baseline" && f(r) > 0 {
			base[r.round] = f(r)
		}
	}
	out := map[int]float64{}
	for _, r := range b.slow {
		if r.prof == name && base[r.round] > 0 && f(r) > 0 {
			out[r.round] = f(r)/base[r.round] - 1
		}
	}
	return out
}

func values(m map[int]float64) []float64 {
	var xs []float64
	for _, x := range m {
		xs = append(xs, x)
	}
	return xs
}

// spread is the median of xs with its range.
type spread struct{ med, lo, hi float64 }

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	return spread{med: median(xs), lo: slices.Min(xs), hi: slices.Max(xs)}
}

// pct renders a spread of fractions as percentages.
func (s spread) pct() string {
	return fmt.Sprintf("%s (%s … %s)", pct(s.med), pct(s.lo), pct(s.hi))
}

// slowdownRatio compares a profiler's paired slowdown with its peer's: the
// ratio of the median slowdowns, which is what the bar judges, and the
// ratios round by round, which show how stable it is.
func (b *bench) slowdownRatio(name, peer string, f func(slowRow) float64) (ratio float64, perRound spread, text string) {
	sp := b.pairedSlowdowns(name, f)
	pf := b.pairedSlowdowns(peer, f)
	s, p := spreadOf(values(sp)), spreadOf(values(pf))
	ratio = s.med / p.med
	var rs []float64
	for round, x := range sp {
		if y, ok := pf[round]; ok && y != 0 {
			rs = append(rs, x/y)
		}
	}
	perRound = spreadOf(rs)
	text = fmt.Sprintf("%s / %s = %.2f; per round %.2f (%.2f … %.2f)", s.pct(), p.pct(), ratio, perRound.med, perRound.lo, perRound.hi)
	return ratio, perRound, text
}

// noise describes how much the baseline itself moved between rounds: a
// slowdown smaller than this is not resolved by the run.
func (b *bench) noise(f func(slowRow) float64) string {
	var xs []float64
	for _, r := range b.slow {
		if r.prof == "baseline" && f(r) > 0 {
			xs = append(xs, f(r))
		}
	}
	if len(xs) < 2 {
		return "one baseline run: noise unknown"
	}
	s := spreadOf(xs)
	return fmt.Sprintf("baseline %.0f ms (%.0f … %.0f) over %d rounds, a range of %.1f %% of its median",
		s.med/1e6, s.lo/1e6, s.hi/1e6, len(xs), 100*(s.hi-s.lo)/s.med)
}

// perRoundTable lists the paired chain slowdowns of every round, so the
// spread behind the medians can be read.
func (b *bench) perRoundTable() string {
	var sb strings.Builder
	profs := profilers("", b.reference)
	sb.WriteString("| round |")
	for _, p := range profs[1:] {
		sb.WriteString(" " + p.name + " |")
	}
	sb.WriteString(" baseline ms |\n|---|" + strings.Repeat("---|", len(profs)) + "\n")
	rounds := 0
	for _, r := range b.slow {
		rounds = max(rounds, r.round+1)
	}
	for round := range rounds {
		var base float64
		for _, r := range b.slow {
			if r.round == round && r.prof == "baseline" {
				base = r.chainNs
			}
		}
		fmt.Fprintf(&sb, "| %d |", round+1)
		for _, p := range profs[1:] {
			cell := "–"
			for _, r := range b.slow {
				if r.round == round && r.prof == p.name && base > 0 && r.chainNs > 0 {
					cell = pct(r.chainNs/base - 1)
				}
			}
			sb.WriteString(" " + cell + " |")
		}
		fmt.Fprintf(&sb, " %.0f |\n", base/1e6)
	}
	return sb.String()
}

// fmt formats the spread with the verb f: the median alone for one value,
// else "median (min … max)".
func (s spread) fmt(f string) string {
	if s.lo == s.hi {
		return fmt.Sprintf(f, s.med)
	}
	return fmt.Sprintf(f+" ("+f+" … "+f+")", s.med, s.lo, s.hi)
}
