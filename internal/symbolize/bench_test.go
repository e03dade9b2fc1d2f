package symbolize

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

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

// benchAddrs returns every 4th address of the fixture's functions, the
// frames a profile of it would hold.
func benchAddrs(b *testing.B, bin string, funcs ...string) []uint64 {
	truth, sizes := nmSymbols(b, fixture(bin)), nmSizesB(b, fixture(bin))
	var addrs []uint64
	for _, fn := range funcs {
		for a := truth[fn]; a < truth[fn]+sizes[fn]; a += 4 {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

func nmSizesB(b *testing.B, path string) map[string]uint64 {
	out, err := exec.Command("nm", "-S", "--defined-only", path).Output()
	if err != nil {
		b.Fatal(err)
	}
	sizes := map[string]uint64{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 4 {
			if n, err := strconv.ParseUint(f[1], 16, 64); err == nil {
				sizes[f[3]] = n
			}
		}
	}
	return sizes
}

// BenchmarkFramesWarm is symbolization throughput on a parsed object with
// DWARF lines and inlined frames (frames/s reported).
func BenchmarkFramesWarm(b *testing.B) {
	path := fixture("inline-gcc")
	obj, err := New(nil, Options{DebugDirs: []string{}}).Open(path, path)
	if err != nil {
		b.Fatal(err)
	}
	addrs := benchAddrs(b, "inline-gcc", "outer", "main")
	var buf []Symbol
	n := 0
	for b.Loop() {
		for _, a := range addrs {
			buf = obj.LookupInlined(a, buf[:0])
			n++
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "frames/s")
}

// BenchmarkFramesCold includes the parse: a new Symbolizer opens the
// stripped binary, finds its debug file by build ID, builds symbol and
// DWARF tables and resolves the addresses once, as the first profile of a
// new binary does.
func BenchmarkFramesCold(b *testing.B) {
	bin := fixture("inline-gcc-stripped")
	dir := b.TempDir()
	id := readelfBuildID(b, bin)
	dst := buildIDPath(dir, id)
	os.MkdirAll(filepath.Dir(dst), 0o755)
	data, _ := os.ReadFile(fixture("inline-gcc.debug"))
	os.WriteFile(dst, data, 0o644)
	addrs := benchAddrs(b, "inline-gcc", "outer", "main")
	n := 0
	for b.Loop() {
		obj, err := New(nil, Options{DebugDirs: []string{dir}}).Open(bin, bin)
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range addrs {
			obj.LookupInlined(a, nil)
			n++
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "frames/s")
}

// BenchmarkCacheMemory measures the heap that cached objects hold: it
// parses the same file into `keep` separate objects (separate Symbolizers,
// so none is shared), forces a GC and divides the live-heap growth by
// keep. The per-1000 figure is that times 1000: what a cache holding
// 1,000 binaries like this one costs.
func BenchmarkCacheMemory(b *testing.B) {
	for _, tc := range []struct{ name, path string }{
		{"libc", libc},
		{"chain-gcc+dwarf", fixture("chain-gcc")},
		{"goprog", fixture("goprog")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if _, err := os.Stat(tc.path); err != nil {
				b.Skip(err)
			}
			const keep = 20
			var perObj float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				objs := make([]*Object, keep)
				for i := range objs {
					o, err := New(nil, Options{DebugDirs: []string{}}).Open(tc.path, tc.path)
					if err != nil {
						b.Fatal(err)
					}
					objs[i] = o
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perObj = float64(after.HeapAlloc-before.HeapAlloc) / keep
				runtime.KeepAlive(objs)
			}
			b.ReportMetric(perObj/1024, "KiB/object")
			b.ReportMetric(perObj*1000/(1<<20), "MiB/1000objects")
		})
	}
}

// libcDebugAddrs returns one address inside each of n functions of libc's
// .dynsym, spread over the library: the frames a profile touching libc
// would hold.
func libcDebugAddrs(b *testing.B, n int) []uint64 {
	syms := nmSymbolsDyn(b, libc)
	addrs := make([]uint64, 0, len(syms))
	for _, a := range syms {
		if a != 0 {
			addrs = append(addrs, a+4)
		}
	}
	slices.Sort(addrs)
	step := max(1, len(addrs)/n)
	var out []uint64
	for i := 0; i < len(addrs) && len(out) < n; i += step {
		out = append(out, addrs[i])
	}
	return out
}

// BenchmarkLibcDebugFile opens libc with its separate debug file
// (libc6-dbg, compressed DWARF) and symbolizes 200 addresses: the cost of
// the first profile that holds libc frames, and the heap the object keeps
// afterwards (after Trim, as the agent calls it after every report).
// With a spill directory, the decompressed DWARF is written once (the
// first iteration) and read from there by the others, as by an agent
// restarted on the same host.
func BenchmarkLibcDebugFile(b *testing.B) {
	id, err := Identify(libc)
	if err != nil {
		b.Skip(err)
	}
	if _, err := os.Stat(buildIDPath("/usr/lib/debug", id.BuildID)); err != nil {
		b.Skipf("no libc debug file (libc6-dbg): %v", err)
	}
	addrs := libcDebugAddrs(b, 200)
	for _, spill := range []bool{false, true} {
		name := "inflate"
		if spill {
			name = "spill"
		}
		b.Run(name, func(b *testing.B) {
			opts := Options{}
			if spill {
				opts.DWARFSpillDir = b.TempDir()
			}
			var kept float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				s := New(nil, opts)
				obj, err := s.Open(libc, libc)
				if err != nil {
					b.Fatal(err)
				}
				if !obj.HasDWARF() {
					b.Fatal("no DWARF from the debug file")
				}
				for _, a := range addrs {
					obj.LookupInlined(a, nil)
				}
				s.Trim()
				runtime.GC()
				runtime.ReadMemStats(&after)
				kept = float64(after.HeapAlloc) - float64(before.HeapAlloc)
				runtime.KeepAlive(obj)
			}
			b.ReportMetric(kept/(1<<20), "MiB-kept")
		})
	}
}
