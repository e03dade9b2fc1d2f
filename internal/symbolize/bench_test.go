package symbolize

import "testing"

const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"

// BenchmarkLookupWarm is the per-frame cost on a parsed object.
func BenchmarkLookupWarm(b *testing.B) {
	obj, err := New(nil, Options{}).Open(libc, libc)
	if err != nil {
		b.Fatal(err)
	}
	addr := nmSymbolsDyn(b, libc)["clock_nanosleep"] + 4
	if s, ok := obj.Lookup(addr); !ok || s.Function != "clock_nanosleep" {
		b.Fatalf("Lookup = %+v", s)
	}
	b.ResetTimer()
	for b.Loop() {
		obj.Lookup(addr)
	}
}

// BenchmarkLookupWarmGo is the per-frame cost in a Go binary (pclntab).
func BenchmarkLookupWarmGo(b *testing.B) {
	path := fixture("goprog")
	obj, err := New(nil, Options{}).Open(path, path)
	if err != nil {
		b.Fatal(err)
	}
	addr := nmSymbols(b, path)["main.gamma"] + 4
	for b.Loop() {
		obj.Lookup(addr)
	}
}

// BenchmarkOpenWarm is Open of a file version already seen (stat only).
func BenchmarkOpenWarm(b *testing.B) {
	s := New(nil, Options{})
	if _, err := s.Open(libc, libc); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s.Open(libc, libc)
	}
}

// BenchmarkParseLibcCold is the once-per-build-ID cost.
func BenchmarkParseLibcCold(b *testing.B) {
	for b.Loop() {
		if _, err := New(nil, Options{DebugDirs: []string{}}).Open(libc, libc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseGoCold parses a 2.5 MB Go binary.
func BenchmarkParseGoCold(b *testing.B) {
	path := fixture("goprog")
	for b.Loop() {
		if _, err := New(nil, Options{}).Open(path, path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKallsymsLoad reads /proc/kallsyms.
func BenchmarkKallsymsLoad(b *testing.B) {
	for b.Loop() {
		if _, err := LoadKallsyms("/proc/kallsyms"); err != nil {
			b.Skip(err)
		}
	}
}
