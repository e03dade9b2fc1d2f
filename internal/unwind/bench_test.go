package unwind

import "testing"

// BenchmarkRuleAtWarm is the per-sample cost once a function was evaluated.
func BenchmarkRuleAtWarm(b *testing.B) {
	tab := openTable(b, libc)
	pc := nmSymbols(b, libc, true)["clock_nanosleep"] + 4
	if _, err := tab.RuleAt(pc); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		tab.RuleAt(pc)
	}
}

// BenchmarkRuleAtCold evaluates one FDE's instructions each time.
func BenchmarkRuleAtCold(b *testing.B) {
	tab := openTable(b, libc)
	pc := nmSymbols(b, libc, true)["clock_nanosleep"] + 4
	for b.Loop() {
		tab.funcs = map[uint64][]row{}
		tab.spans = nil
		tab.RuleAt(pc)
	}
}

// BenchmarkOpenTableLibc is the once-per-build-ID cost.
func BenchmarkOpenTableLibc(b *testing.B) {
	for b.Loop() {
		openTable(b, libc)
	}
}

// BenchmarkWalk is a walk's own cost, rules at hand: a qsort-like stack
// (a comparator called back from frameless code) under 20 frames of
// frame-pointer code, and the same stack with frame pointers all the way.
func BenchmarkWalk(b *testing.B) {
	build := func(frameless bool) Stack {
		st := newStack()
		bp := st.fpFrame(ret(fnStart), 0)
		for range 20 {
			bp = st.fpFrame(ret(fnMain), bp)
		}
		if frameless {
			st.push(ret(fnMain))
			st.push(1)
			st.push(2)
			st.push(3)
			bp = st.fpFrame(ret(fnQsort), bp)
		}
		ip := uint64(fnCmp + 0x30)
		return Stack{IP: ip, SP: st.sp, FP: bp, Window: st.window(st.sp, 1024), Chain: st.kernelChain(ip, bp)}
	}
	for _, tt := range []struct {
		name      string
		frameless bool
	}{{"frame-pointers", false}, {"qsort-callback", true}} {
		s := build(tt.frameless)
		dst := make([]uint64, 0, 128)
		b.Run(tt.name, func(b *testing.B) {
			for b.Loop() {
				Walk(s, synthetic.lookup, dst[:0], 127)
			}
		})
	}
}
