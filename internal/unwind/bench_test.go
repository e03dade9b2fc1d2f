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
