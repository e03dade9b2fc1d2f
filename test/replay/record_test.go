package replay

import (
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/collect"
	"github.com/spanprof/spanprof/internal/export/folded"
	"github.com/spanprof/spanprof/internal/jvm"
	"github.com/spanprof/spanprof/internal/jvm/jvmtest"
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/testutil"
)

// recording is how a case's fixture runs: start returns the pids to
// record once they run their known stacks (killed at cleanup).
type recording struct {
	name, stack string
	start       func(t *testing.T) []int
	// perfMap asks the process for its JIT perf map before the profile is
	// built (a JVM writes one only on request).
	perfMap func(t *testing.T, pid int)
}

// recordFrequency and recordFor are how long and how often a case is
// sampled: a few hundred samples a case.
const (
	recordFrequency = 99
	recordFor       = 3 * time.Second
)

var recordings = []recording{
	{name: "c", stack: "chain-gcc (testdata/fixtures): main → level1 … level5, gcc -O2 with frame pointers",
		start: func(t *testing.T) []int {
			dir := testutil.Fixtures(t, "fixtures", []string{"gcc", "clang-19", "go"})
			return []int{startReady(t, filepath.Join(dir, "build", "chain-gcc"), "60000", filepath.Join(t.TempDir(), "marks"), "cpu")}
		}},
	{name: "go", stack: "gofix (testdata/fixtures): main.main → main.spinOuter → main.spinInner",
		start: func(t *testing.T) []int {
			dir := testutil.Fixtures(t, "fixtures", []string{"gcc", "clang-19", "go"})
			return []int{startReady(t, filepath.Join(dir, "build", "gofix"), "60000")}
		}},
	{name: "jvm", stack: "Hot.java (internal/jvm/testdata) on HotSpot 17 with -XX:+PreserveFramePointer: two threads in the JIT-compiled Hot.work",
		start: func(t *testing.T) []int {
			// Start returns once C2 compiled Hot.work.
			cmd := jvmtest.Start(t, jvmtest.Options{Flags: []string{"-XX:+PreserveFramePointer"}}, "2")
			return []int{cmd.Process.Pid}
		},
		perfMap: func(t *testing.T, pid int) {
			m := jvm.NewPerfMapper(jvm.PerfMapOptions{MinInterval: time.Hour})
			if !m.Refresh(uint32(pid)) {
				t.Fatalf("jvm %d wrote no perf map: %+v", pid, m.Stats())
			}
		}},
	{name: "python", stack: "pystack.py (testdata/python) on CPython 3.12 -X perf: a worker thread in worker → hot_loop → middle → inner, the main thread in main_loop → main_middle → main_inner; CPython has no frame pointers",
		start: func(t *testing.T) []int {
			py := pyenvPython(t, "3.12")
			script := filepath.Join(testutil.RepoRoot(), "testdata", "python", "pystack.py")
			return []int{startReady(t, py, "-X", "perf", script, "60", filepath.Join(t.TempDir(), "threads"))}
		}},
}

// pyenvPython returns pyenv's CPython of version prefix v, skipping t
// without one.
func pyenvPython(t *testing.T, v string) string {
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".pyenv")
	}
	m, _ := filepath.Glob(filepath.Join(root, "versions", v+".*", "bin", "python"+v))
	if len(m) == 0 {
		t.Skipf("no CPython %s under %s/versions (pyenv install %s)", v, root, v)
	}
	return m[0]
}

// startReady runs a fixture that prints "ready PID" and returns its pid
// once it did.
func startReady(t *testing.T, path string, args ...string) int {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") {
				line <- sc.Text()
			}
		}
	}()
	select {
	case l := <-line:
		if f := strings.Fields(l); len(f) == 2 && f[1] != strconv.Itoa(cmd.Process.Pid) {
			t.Fatalf("%s says %q, its pid is %d", path, l, cmd.Process.Pid)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no ready line in 30s", path)
	}
	return cmd.Process.Pid
}

// record runs r's fixture under the real sampler and writes the case:
// its events as the kernel sent them, the processes' maps and objects, the
// kernel symbols of its kernel stacks, and the folded stacks the replay
// builds from them. The same events go to a pipeline on the real sampler
// as they arrive, which reads the live processes and their files: what it
// builds is compared with the replay's (LiveMatch).
func record(t *testing.T, r recording) {
	testutil.RequireRoot(t, "recording a replay case needs root to load eBPF programs")
	pids := r.start(t)
	s, err := sampler.New(sampler.Options{Frequency: recordFrequency, PIDs: pids, NewProcessWindow: sampler.WindowMax})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg := pipeline.Config{Frequency: recordFrequency,
		Symbolization: pipeline.Symbolization{Mode: symbolize.ModeLocal, NoJVMPerfmap: true, OnlyDebugDirs: true},
		Budget:        pipeline.Budget{DWARFSpillDir: t.TempDir()}}
	kall, err := symbolize.LoadKallsyms("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	var memMu sync.Mutex
	var mem []MemoryRead
	readMemory := func(pid uint32, addr uint64, b []byte) (int, error) {
		n, err := collect.ReadProcMemory(pid, addr, b)
		if n > 0 {
			memMu.Lock()
			mem = append(mem, MemoryRead{PID: pid, Addr: addr, Data: slices.Clone(b[:n])})
			memMu.Unlock()
		}
		return n, err
	}
	live, err := pipeline.New(cfg, s, pipeline.Parts{Kernel: collect.KernelFrames(kall), ReadMemory: readMemory})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	go s.Run()
	var events []sampler.Event
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range s.Events() {
			events = append(events, e)
			live.Handle(e)
		}
	}()
	time.Sleep(recordFor)
	s.Stop()
	<-done
	samples := 0
	for _, e := range events {
		if e.Sample != nil {
			samples++
		}
	}
	if samples == 0 {
		t.Fatalf("%s: the sampler sent no sample of %v", r.name, pids)
	}

	dir := filepath.Join(corpusDir(), r.name)
	must(t, os.RemoveAll(dir))
	must(t, os.MkdirAll(filepath.Join(dir, "objects"), 0o755))
	c := &Case{Name: r.name, Stack: r.stack, Kernel: kernelRelease(t), Frequency: recordFrequency, Seconds: recordFor.Seconds()}
	for _, pid := range pids {
		if r.perfMap != nil {
			r.perfMap(t, pid)
		}
		c.Processes = append(c.Processes, snapshot(t, dir, pid))
	}
	var end time.Time
	for _, e := range events {
		if e.Sample != nil && e.Sample.Time.After(end) {
			end = e.Sample.Time
		}
	}
	prof := live.Build(end.Add(time.Second))
	memMu.Lock()
	c.Memory = mem
	memMu.Unlock()
	var want, outlined strings.Builder
	must(t, folded.Write(&want, prof))
	must(t, folded.Write(&outlined, withoutInlined(prof)))
	must(t, writeKallsyms(filepath.Join(dir, "kallsyms"), events))
	must(t, writeEvents(filepath.Join(dir, "events.jsonl.gz"), events))

	// The replay of what was written, from the corpus alone; then the
	// objects and perf maps are cut down as far as the replay builds the
	// same stacks.
	ks := filepath.Join(dir, "kallsyms")
	got := replay(t, c, events, procRoot(t, dir, c), ks)
	minimize(t, dir, c, prof, func() bool { return replay(t, c, events, procRoot(t, dir, c), ks) == got })
	c.LiveMatch = match(parseFolded(got), parseFolded(want.String()))
	c.LiveMatchOutlined = match(parseFolded(got), parseFolded(outlined.String()))
	t.Logf("%s: %d events, %d samples; the replay builds %.1f %% of the samples' stacks as the live pipeline did, %.1f %% without its inlined frames",
		r.name, len(events), samples, 100*c.LiveMatch, 100*c.LiveMatchOutlined)
	if c.LiveMatchOutlined < 0.9 {
		t.Errorf("%s: the replay builds only %.1f %% of the live stacks:\nlive:\n%s\nreplay:\n%s", r.name, 100*c.LiveMatchOutlined, outlined.String(), got)
	}
	share(t, dir, c)
	b, err := json.MarshalIndent(c, "", "  ")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "case.json"), append(b, '\n'), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "expected.folded"), []byte(got), 0o644))
}

// share moves the case's objects to testdata/replay/objects, named by
// content, and removes the objects no case uses any more.
func share(t *testing.T, dir string, c *Case) {
	shared := filepath.Join(corpusDir(), "objects")
	must(t, os.MkdirAll(shared, 0o755))
	for pi := range c.Processes {
		for oi := range c.Processes[pi].Objects {
			o := &c.Processes[pi].Objects[oi]
			b, err := os.ReadFile(filepath.Join(corpusDir(), o.File))
			must(t, err)
			sum := sha256.Sum256(b)
			name := filepath.Join("objects", strings.TrimSuffix(filepath.Base(o.File), ".gz")+"-"+hex.EncodeToString(sum[:6])+".gz")
			must(t, os.WriteFile(filepath.Join(corpusDir(), name), b, 0o644))
			o.File = name
		}
	}
	must(t, os.RemoveAll(filepath.Join(dir, "objects")))
	used := map[string]bool{}
	cases, _ := filepath.Glob(filepath.Join(corpusDir(), "*", "case.json"))
	for _, p := range cases {
		if filepath.Dir(p) == dir {
			continue // written after this
		}
		b, err := os.ReadFile(p)
		must(t, err)
		var other Case
		must(t, json.Unmarshal(b, &other))
		for _, pr := range other.Processes {
			for _, o := range pr.Objects {
				used[o.File] = true
			}
		}
	}
	for _, pr := range c.Processes {
		for _, o := range pr.Objects {
			used[o.File] = true
		}
	}
	all, _ := filepath.Glob(filepath.Join(shared, "*.gz"))
	for _, p := range all {
		if !used[filepath.Join("objects", filepath.Base(p))] {
			must(t, os.Remove(p))
		}
	}
}

// withoutInlined returns p with the inlined frames of its stacks left out.
func withoutInlined(p *profile.Profile) *profile.Profile {
	q := *p
	q.Samples = make([]profile.Sample, len(p.Samples))
	for i, s := range p.Samples {
		s.Frames = slices.DeleteFunc(slices.Clone(s.Frames), func(f profile.Frame) bool { return f.Inlined })
		q.Samples[i] = s
	}
	return &q
}

// minimize cuts the case's objects and perf maps down to what its stacks
// use (the addresses of the live profile's frames), keeping each cut only
// when same() still holds: the replay builds the same stacks.
func minimize(t *testing.T, dir string, c *Case, prof *profile.Profile, same func() bool) {
	offs := map[string][]uint64{} // file offsets by object path
	var addrs []uint64
	for _, s := range prof.Samples {
		for _, f := range s.Frames {
			addrs = append(addrs, f.Address, f.Address-1)
			if m := f.Mapping; m != nil && !m.Kernel && m.Path != "" {
				o := f.Address - m.Start + m.Offset
				offs[m.Path] = append(offs[m.Path], o, o-1)
			}
		}
	}
	for pi := range c.Processes {
		p := &c.Processes[pi]
		for oi := range p.Objects {
			o := &p.Objects[oi]
			path := filepath.Join(corpusDir(), o.File)
			orig, err := readGzip(path)
			must(t, err)
			try := func(cut func(b []byte) (bool, error)) bool {
				b := slices.Clone(orig)
				if ok, err := cut(b); err != nil || !ok {
					must(t, err)
					return false
				}
				must(t, writeGzip(path, b))
				if same() {
					orig = b
					return true
				}
				must(t, writeGzip(path, orig))
				t.Logf("%s: %s keeps what the cut would drop: the replay differs without it", c.Name, o.Path)
				return false
			}
			o.SymbolsKept = try(func(b []byte) (bool, error) {
				vs, err := fileVaddrs(b, offs[o.Path])
				if err != nil {
					return false, err
				}
				return filterSymtab(b, vs)
			})
			o.NoUnwindTables = try(func(b []byte) (bool, error) {
				return true, zeroSections(b, ".eh_frame", ".eh_frame_hdr")
			})
		}
		if p.PerfMap != "" {
			path := filepath.Join(dir, p.PerfMap)
			orig, err := os.ReadFile(path)
			must(t, err)
			must(t, os.WriteFile(path, []byte(perfMapUsed(string(orig), addrs)), 0o644))
			if !same() {
				t.Logf("%s: the perf map of %d is kept whole: the replay differs with the entries its stacks use alone", c.Name, p.PID)
				must(t, os.WriteFile(path, orig, 0o644))
			}
		}
	}
}

// perfMapUsed keeps the perf map lines ("START SIZE name", hex) whose
// code holds one of addrs.
func perfMapUsed(m string, addrs []uint64) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(m, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		start, err1 := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
		size, err2 := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if slices.ContainsFunc(addrs, func(a uint64) bool { return a >= start && a < start+size }) {
			b.WriteString(l)
		}
	}
	return b.String()
}

func kernelRelease(t *testing.T) string {
	var u syscall.Utsname
	must(t, syscall.Uname(&u))
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// snapshot reads what the replay needs of /proc/PID: maps, comm, exe,
// the perf map, and the objects it maps executable, written to the corpus.
func snapshot(t *testing.T, dir string, pid int) Process {
	pd := fmt.Sprintf("/proc/%d", pid)
	maps, err := os.ReadFile(pd + "/maps")
	must(t, err)
	comm, err := os.ReadFile(pd + "/comm")
	must(t, err)
	exe, err := os.Readlink(pd + "/exe")
	must(t, err)
	p := Process{PID: uint32(pid), NSPID: uint32(pid), Comm: strings.TrimSpace(string(comm)), Exe: exe, Maps: string(maps)}
	if b, err := os.ReadFile(fmt.Sprintf("/tmp/perf-%d.map", pid)); err == nil {
		p.PerfMap = fmt.Sprintf("perf-%d.map", pid)
		must(t, os.WriteFile(filepath.Join(dir, p.PerfMap), b, 0o644))
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.Contains(f[1], "x") || !strings.HasPrefix(f[5], "/") || seen[f[5]] {
			continue
		}
		path := f[5]
		seen[path] = true
		// map_files reads the mapped file even when its path has been
		// replaced since.
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("maps line %q", l)
		}
		src := fmt.Sprintf("%s/map_files/%x-%x", pd, start, end)
		b, cut, err := skeleton(src)
		if err != nil {
			t.Fatalf("object %s: %v", path, err)
		}
		id := buildID(t, src)
		if id == "" {
			t.Fatalf("object %s has no build ID: the corpus keys objects by build ID", path)
		}
		name := filepath.Base(path) + "-" + id[:12] + ".gz"
		must(t, writeGzip(filepath.Join(dir, "objects", name), b))
		name = filepath.Join(filepath.Base(dir), "objects", name)
		p.Objects = append(p.Objects, Object{Path: path, BuildID: id, File: name, Skeleton: cut, Size: int64(len(b))})
	}
	return p
}

func buildID(t *testing.T, path string) string {
	f, err := elf.Open(path)
	must(t, err)
	defer f.Close()
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		b, err := s.Data()
		must(t, err)
		for len(b) >= 12 {
			nl, dl, typ := le32(b), le32(b[4:]), le32(b[8:])
			na, da := (nl+3)&^3, (dl+3)&^3
			if 12+na+da > uint32(len(b)) {
				break
			}
			if typ == 3 && string(b[12:12+nl]) == "GNU\x00" {
				return hex.EncodeToString(b[12+na : 12+na+dl])
			}
			b = b[12+na+da:]
		}
	}
	return ""
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// writeKallsyms writes the kallsyms lines of the symbols the events'
// kernel stacks run through, and of the symbol after each (where it
// ends), in /proc/kallsyms's format.
func writeKallsyms(path string, events []sampler.Event) error {
	all, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		return err
	}
	type sym struct {
		addr uint64
		line string
	}
	var syms []sym
	for _, l := range strings.Split(string(all), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		syms = append(syms, sym{a, l})
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	// The kernel's first text symbol keeps a case without kernel stacks
	// from an empty file, which the kallsyms reader refuses.
	keep := map[int]bool{}
	for i, s := range syms {
		if f := strings.Fields(s.line); f[1] == "T" || f[1] == "t" {
			keep[i] = true
			break
		}
	}
	for _, e := range events {
		if e.Sample == nil {
			continue
		}
		for _, a := range e.Sample.KernStack {
			i := sort.Search(len(syms), func(i int) bool { return syms[i].addr > a }) - 1
			if i >= 0 {
				keep[i] = true
				if i+1 < len(syms) {
					keep[i+1] = true
				}
			}
		}
	}
	idx := make([]int, 0, len(keep))
	for i := range keep {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var b strings.Builder
	for _, i := range idx {
		b.WriteString(syms[i].line + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
