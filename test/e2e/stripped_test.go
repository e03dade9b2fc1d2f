package e2e

import (
	"bytes"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/export/flamegraph"
	"github.com/spanprof/spanprof/internal/export/folded"
	"github.com/spanprof/spanprof/internal/export/pprof"
	"github.com/spanprof/spanprof/internal/testutil"
)

// fdeRange is one FDE's pc range as readelf prints it, the ground truth
// for where a stripped binary's functions start.
type fdeRange struct{ start, end uint64 }

func readelfFDEs(t *testing.T, path string) []fdeRange {
	t.Helper()
	out, err := exec.Command("readelf", "--debug-dump=frames", path).Output()
	if err != nil {
		t.Fatalf("readelf %s: %v", path, err)
	}
	var rs []fdeRange
	for _, m := range regexp.MustCompile(`FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)`).FindAllSubmatch(out, -1) {
		s, _ := strconv.ParseUint(string(m[1]), 16, 64)
		e, _ := strconv.ParseUint(string(m[2]), 16, 64)
		rs = append(rs, fdeRange{s, e})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	return rs
}

// strippedSystemBinary returns path when it is a stripped binary whose
// debug file is not installed, so that no symbol can name its code.
func strippedSystemBinary(t *testing.T, path string) *elf.File {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("no %s: %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
	if f.Section(".symtab") != nil {
		t.Skipf("%s is not stripped here", path)
	}
	if id := buildIDOf(f); id != "" {
		if _, err := os.Stat(filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")); err == nil {
			t.Skipf("%s has its debug file installed here", path)
		}
	}
	return f
}

func buildIDOf(f *elf.File) string {
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		return ""
	}
	d, err := s.Data()
	if err != nil || len(d) < 16+20 {
		return ""
	}
	return hex.EncodeToString(d[16:])
}

// fileToVaddr translates a file offset of f to its virtual address.
func fileToVaddr(f *elf.File, off uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off-p.Off < p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// TestRecordStrippedBinaryAggregates records Debian's stripped gzip
// compressing a file, from its exec to its exit: every frame of gzip is
// named by the start of the FDE (readelf's) that holds its address, as a
// file offset, so that the samples of one function aggregate into one
// frame in OTLP, pprof, folded stacks and the flame graph, and one line
// says how many frames lacked symbols and what would name them.
func TestRecordStrippedBinaryAggregates(t *testing.T) {
	testutil.RequireRoot(t)
	const bin = "/usr/bin/gzip"
	ef := strippedSystemBinary(t, bin)
	fdes := readelfFDEs(t, bin)
	if len(fdes) == 0 {
		t.Skipf("%s has no .eh_frame FDEs", bin)
	}
	dir := t.TempDir()
	input := filepath.Join(dir, "input")
	data := make([]byte, 48<<20)
	rand.Read(data)
	if err := os.WriteFile(input, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "p.otlp.json")
	cmd := exec.Command(binPath, "record", "--symbolize=local", "--frequency", "199", "--output", out, "--", bin, "-1", "-f", "-k", input)
	cmd.Env = append(os.Environ(), "DEBUGINFOD_URLS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("record: %v\n%s", err, stderr.String())
	}
	p := readProfile(t, out)

	// Every gzip frame: its name against the FDE holding its address.
	fdeOf := func(vaddr uint64) (fdeRange, bool) {
		i := sort.Search(len(fdes), func(i int) bool { return fdes[i].start > vaddr }) - 1
		if i >= 0 && vaddr < fdes[i].end {
			return fdes[i], true
		}
		return fdeRange{}, false
	}
	leafByName := map[string]int{}
	leafByFDE := map[fdeRange]int{}
	addrsByName := map[string]map[uint64]bool{}
	frames, samples := 0, 0
	// topByFDE counts the samples whose first frame of all (no kernel
	// frame above it) is gzip's: the folded line of those ends in it.
	topByFDE := map[fdeRange]int{}
	for _, s := range p.Samples {
		leafSeen := false
		for j, f := range s.Frames {
			if f.Mapping == nil || f.Mapping.Path != bin {
				continue
			}
			frames++
			off := f.Address - f.Mapping.Start + f.Mapping.Offset
			vaddr, ok := fileToVaddr(ef, off)
			if !ok {
				t.Fatalf("frame %#x: file offset %#x in no segment", f.Address, off)
			}
			r, ok := fdeOf(vaddr)
			if !ok {
				if f.Function != "" {
					t.Errorf("frame at vaddr %#x, in no FDE, named %q", vaddr, f.Function)
				}
				continue
			}
			startOff := r.start - vaddr + off
			if want := fmt.Sprintf("gzip+0x%x", startOff); f.Function != want {
				t.Errorf("frame at vaddr %#x (FDE %#x..%#x) named %q, want %q", vaddr, r.start, r.end, f.Function, want)
			}
			if !leafSeen {
				leafSeen = true
				samples++
				leafByName[f.Function]++
				leafByFDE[r]++
				if j == 0 {
					topByFDE[r]++
				}
				if addrsByName[f.Function] == nil {
					addrsByName[f.Function] = map[uint64]bool{}
				}
				addrsByName[f.Function][f.Address] = true
			}
		}
	}
	if samples < 100 {
		t.Fatalf("only %d samples with gzip frames\n%s", samples, stderr.String())
	}
	// The hottest function by the FDE ground truth is one frame with all
	// its samples, although they fall on many addresses.
	var hot fdeRange
	for r, n := range leafByFDE {
		if n > leafByFDE[hot] {
			hot = r
		}
	}
	var hotName string
	for _, pr := range ef.Progs {
		if pr.Type == elf.PT_LOAD && hot.start >= pr.Vaddr && hot.start-pr.Vaddr < pr.Filesz {
			hotName = fmt.Sprintf("gzip+0x%x", hot.start-pr.Vaddr+pr.Off)
		}
	}
	t.Logf("%d samples in gzip, %d frames; hottest FDE %#x..%#x: %d samples on %d addresses as %q (%d)",
		samples, frames, hot.start, hot.end, leafByFDE[hot], len(addrsByName[hotName]), hotName, leafByName[hotName])
	if leafByName[hotName] != leafByFDE[hot] {
		t.Errorf("hottest function: %d samples under %q, %d in its FDE", leafByName[hotName], hotName, leafByFDE[hot])
	}
	if len(addrsByName[hotName]) < 2 {
		t.Errorf("the hottest function's samples fell on %d address(es): nothing was aggregated", len(addrsByName[hotName]))
	}

	// The same aggregation in the flat outputs made from the profile.
	var fb bytes.Buffer
	if err := folded.Write(&fb, p); err != nil {
		t.Fatal(err)
	}
	foldedLeaf := 0
	for _, l := range strings.Split(fb.String(), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 || !strings.HasSuffix(l[:i], ";"+hotName) {
			continue
		}
		n, _ := strconv.Atoi(l[i+1:])
		foldedLeaf += n
	}
	if foldedLeaf != topByFDE[hot] {
		t.Errorf("folded: %d samples end in %s, want %d (of %d in it, the rest under kernel frames)", foldedLeaf, hotName, topByFDE[hot], leafByFDE[hot])
	}
	pp, err := pprof.Build(p)
	if err != nil {
		t.Fatal(err)
	}
	funcs := 0
	for _, fn := range pp.Function {
		if fn.Name == hotName {
			funcs++
		}
	}
	if funcs != 1 {
		t.Errorf("pprof: %d functions named %s, want 1", funcs, hotName)
	}
	d := flamegraph.NewData(p)
	names := 0
	for _, fr := range d.Frames {
		if d.Strings[fr[0]] == hotName {
			names++
		}
	}
	if names != 1 {
		t.Errorf("flame graph: %d frames named %s, want 1", names, hotName)
	}

	var line string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "without symbols") {
			line = l
		}
	}
	if !strings.Contains(line, "(gzip)") || !strings.Contains(line, "DEBUGINFOD_URLS") || !strings.Contains(line, "debug package") ||
		!regexp.MustCompile(`: [1-9]\d* functions? named by`).MatchString(line) {
		t.Errorf("want one line saying gzip's frames lacked symbols, how many functions its FDEs named and what would name them; got %q\n%s", line, stderr.String())
	}
}
