package tracectx

import (
	"bytes"
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestGoOffsetsTableMatchesDWARF builds the labels fixture with every
// covered Go release, for amd64 and arm64, reads its offsets from DWARF,
// and checks that the table (used for stripped binaries) gives the same
// answer, and that the stripped build of the same source resolves to it.
// One table serves both architectures: every release lays g and m out
// alike on them.
func TestGoOffsetsTableMatchesDWARF(t *testing.T) {
	for _, arch := range []string{"", "arm64"} {
		for _, tc := range goFixtureToolchains {
			t.Run(tc+"-"+cmp.Or(arch, "host"), func(t *testing.T) {
				testGoOffsetsTable(t, tc, arch)
			})
		}
	}
}

func testGoOffsetsTable(t *testing.T, tc, arch string) {
	full, err := GoOffsets(buildGoFixture(t, goFixtureBuild{toolchain: tc, pkg: "labels", goarch: arch}))
	if err != nil {
		t.Fatalf("GoOffsets: %v", err)
	}
	if full.Source != "dwarf" {
		t.Fatalf("unstripped build: offsets from %q, want dwarf", full.Source)
	}
	if tc != "local" && !strings.HasPrefix(full.GoVersion, tc) {
		t.Errorf("GoVersion %q, want %s", full.GoVersion, tc)
	}
	table, err := goStructsFromTable(full.GoVersion)
	if err != nil {
		t.Fatalf("table: %v", err)
	}
	table.GoVersion, table.TLSG, table.TLSSource, table.Source = full.GoVersion, full.TLSG, full.TLSSource, full.Source
	if *table != *full {
		t.Errorf("table != dwarf:\n table %+v\n dwarf %+v", *table, *full)
	}
	stripped, err := GoOffsets(buildGoFixture(t, goFixtureBuild{toolchain: tc, pkg: "labels", stripped: true, goarch: arch}))
	if err != nil {
		t.Fatalf("GoOffsets stripped: %v", err)
	}
	if stripped.Source != "table" {
		t.Errorf("stripped build: offsets from %q, want table", stripped.Source)
	}
	stripped.Source = full.Source
	if *stripped != *full {
		t.Errorf("stripped != unstripped:\n stripped %+v\n full     %+v", *stripped, *full)
	}
	switch goarch := cmp.Or(arch, runtime.GOARCH); {
	case goarch == "arm64" && full.TLSSource != goRegGSource:
		t.Errorf("arm64: g from %q, want %s", full.TLSSource, goRegGSource)
	case goarch == "amd64" && full.TLSG != -8:
		t.Errorf("internally linked: TLSG %d, want -8", full.TLSG)
	}
	wantLayout := GoLabelsSlice
	if m, _ := goMinor(full.GoVersion); m <= 23 {
		wantLayout = GoLabelsMap
	}
	if full.Layout != wantLayout {
		t.Errorf("layout %v, want %v", full.Layout, wantLayout)
	}
}

// TestGoTLSGCgo checks the g slot of an externally linked binary with C
// thread-locals: the symbol table and the code scan must agree, and the
// slot must not be the internal-linking -8.
func TestGoTLSGCgo(t *testing.T) {
	for _, stripped := range []bool{false, true} {
		bin := buildGoFixture(t, goFixtureBuild{toolchain: "local", pkg: "labels", cgo: true, stripped: stripped})
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		code, err := goTLSGFromCode(f)
		if err != nil {
			t.Fatalf("code scan: %v", err)
		}
		if code == goInternalTLSG {
			t.Errorf("stripped=%v: code scan found %d; the C thread-locals should move g", stripped, code)
		}
		info, err := GoOffsets(bin)
		if err != nil {
			t.Fatalf("GoOffsets: %v", err)
		}
		wantSrc := "symtab"
		if stripped {
			wantSrc = "code"
		}
		if info.TLSG != code || info.TLSSource != wantSrc {
			t.Errorf("stripped=%v: TLSG %d from %s, want %d from %s", stripped, info.TLSG, info.TLSSource, code, wantSrc)
		}
	}
}

func TestGoOffsetsErrors(t *testing.T) {
	tests := []struct {
		name    string
		version string
		want    error
		mention string
	}{
		{"too old", "go1.20.14", ErrUnsupportedGo, "go1.20.14"},
		{"too new", "go1.27.1", ErrUnsupportedGo, "go1.27.1"},
		{"devel", "devel go1.28-abcdef", ErrUnsupportedGo, "go1.28"},
		{"garbage", "gccgo", ErrUnsupportedGo, "gccgo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := goStructsFromTable(tt.version)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("goStructsFromTable(%q) = %v, want %v naming %q", tt.version, err, tt.want, tt.mention)
			}
		})
	}
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if _, err := GoOffsets(p); !errors.Is(err, ErrNotGoBinary) {
			t.Errorf("GoOffsets(%s) = %v, want ErrNotGoBinary", p, err)
		}
		break
	}
}

func TestGoMinor(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"go1.21.13", 21, true},
		{"go1.26.8", 26, true},
		{"go1.24rc1", 24, true},
		{"go1.23", 23, true},
		{"devel go1.27-1234 +0000", 27, true},
		{"go2.0", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := goMinor(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("goMinor(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestGoTLSGScanChunks: the chunked scan counts each load once, also one
// that straddles two chunks, whatever the chunk size.
func TestGoTLSGScanChunks(t *testing.T) {
	load := func(disp int32) []byte {
		b := []byte{0x64, 0x4c, 0x8b, 0x34, 0x25, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[5:], uint32(disp))
		return b
	}
	var text []byte
	for i := range 40 {
		text = append(text, bytes.Repeat([]byte{0x90}, i%7)...)
		text = append(text, load(-8)...)
		if i%3 == 0 {
			text = append(text, load(-40)...)
			text = append(text, load(16)...) // positive: not g's slot
		}
	}
	for _, chunk := range []int{1, 5, 9, 10, 13, 64, len(text), 4 * len(text)} {
		votes := map[int32]int{}
		_, ok, err := goTLSGScan(bytes.NewReader(text), votes, 1000, chunk)
		if err != nil || ok {
			t.Fatalf("chunk %d: ok %v, err %v", chunk, ok, err)
		}
		if votes[-8] != 40 || votes[-40] != 14 || len(votes) != 2 {
			t.Errorf("chunk %d: votes %v, want -8: 40 and -40: 14", chunk, votes)
		}
		disp, ok, err := goTLSGScan(bytes.NewReader(text), map[int32]int{}, 16, chunk)
		if err != nil || !ok || disp != -8 {
			t.Errorf("chunk %d: first to 16 votes %d, %v, %v; want -8", chunk, disp, ok, err)
		}
	}
}

// TestGoTypesInOneUnit: goFindDWARFTypes stops after the runtime unit
// that holds runtime.g, on the linker writing every type into that one
// unit. Every runtime unit of each toolchain's build is walked here: each
// type of goDWARFTypes is in the unit of runtime.g, and in no other.
func TestGoTypesInOneUnit(t *testing.T) {
	for _, tc := range goFixtureToolchains {
		t.Run(tc, func(t *testing.T) {
			f, err := elf.Open(buildGoFixture(t, goFixtureBuild{toolchain: tc, pkg: "labels"}))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			unitOf := map[string][]int{}
			n := 0
			err = goRuntimeUnits(f, func(rd *runtimeDWARF) (bool, error) {
				found := map[string]dwarf.Type{}
				err := goFindUnitTypes(rd, found)
				for name := range found {
					unitOf[name] = append(unitOf[name], n)
				}
				n++
				return false, err // every unit
			})
			if err != nil {
				t.Fatal(err)
			}
			g := unitOf["runtime.g"]
			if len(g) != 1 || len(unitOf["runtime.m"]) == 0 || len(unitOf["runtime/pprof.labelMap"]) == 0 {
				t.Fatalf("types by runtime unit (of %d): %v", n, unitOf)
			}
			for name, units := range unitOf {
				if len(units) != 1 || units[0] != g[0] {
					t.Errorf("%s in runtime units %v, runtime.g in %d (of %d)", name, units, g[0], n)
				}
			}
			t.Logf("%d runtime units, the types in number %d", n, g[0])
		})
	}
}
