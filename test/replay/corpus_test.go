package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/collect"
	"github.com/spanprof/spanprof/internal/export/folded"
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/pipeline/pipelinetest"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/testutil"
)

// A case directory of testdata/replay holds:
//
//	case.json        the Case: its processes and the objects they map
//	events.jsonl.gz  the decoded events, one JSON Event a line, in ring order
//	kallsyms         the kernel symbols the kernel stacks run through
//	expected.folded  the folded stacks the replay must build
//	perf-PID.map     a process's JIT perf map, the entries its stacks use
//
// and testdata/replay/objects/ the objects the cases' processes map
// executable, gzipped, named by content: cases that map the same object,
// cut alike, share it.

// Case is a recording's description.
type Case struct {
	// Name is the case's directory; Stack says what its fixture runs.
	Name, Stack string
	// Kernel is the release of the kernel it was recorded on.
	Kernel    string
	Frequency int
	Seconds   float64
	Processes []Process
	// Memory is what the unwinder read of the processes' memory: the
	// code of JIT regions (CPython's perf trampolines), whose
	// instructions give the rule to unwind through them.
	Memory []MemoryRead `json:",omitempty"`
	// LiveMatch is the share of samples whose folded stack the replay
	// builds as it did from the live processes' own files at recording
	// time; LiveMatchOutlined the same with the live stacks' inlined
	// frames left out, which the skeletons, without DWARF, do not have.
	LiveMatch, LiveMatchOutlined float64
}

// Process is one recorded process: what the tracker and the perf maps
// read of /proc/PID.
type Process struct {
	PID   uint32
	NSPID uint32
	Comm  string
	Exe   string
	// Maps is /proc/PID/maps as it was read after the recording.
	Maps string
	// PerfMap names the process's /tmp/perf-PID.map in the case
	// directory, "" without one.
	PerfMap string
	Objects []Object
}

// Object is a file the process maps executable.
type Object struct {
	Path    string
	BuildID string
	// File is the object's gzip, relative to testdata/replay.
	File string
	// Skeleton: cut down to the sections unwinding and symbolization
	// read (skeleton), else kept whole. SymbolsKept: its .symtab holds
	// only the symbols the case's stacks run through (filterSymtab).
	// NoUnwindTables: its .eh_frame is zeroed, which the replay does not
	// read. Each cut is made only when the replay builds the same stacks
	// with it.
	Skeleton, SymbolsKept, NoUnwindTables bool
	Size                                  int64
}

// MemoryRead is one read of a process's memory.
type MemoryRead struct {
	PID  uint32
	Addr uint64
	Data hexBytes
}

// memoryOf serves the reads recorded in c; an address never read at
// recording fails, as memory of a process gone would.
func memoryOf(c *Case) collect.MemoryReader {
	return func(pid uint32, addr uint64, b []byte) (int, error) {
		for _, m := range c.Memory {
			if m.PID == pid && m.Addr == addr {
				return copy(b, m.Data), nil
			}
		}
		return 0, fmt.Errorf("read memory of %d at %#x: not recorded", pid, addr)
	}
}

// Event is one sampler.Event as the corpus keeps it.
type Event struct {
	Sample *Sample            `json:",omitempty"`
	Proc   *sampler.ProcEvent `json:",omitempty"`
}

// Sample is a sampler.Record whose stack window is written in hex rather
// than base64: a byte sequence the windows of two samples share is then
// the same text whatever its offset, and compresses.
type Sample struct {
	*sampler.Record
	StackTop hexBytes `json:",omitempty"`
}

type hexBytes []byte

func (h hexBytes) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(h)), nil }

func (h *hexBytes) UnmarshalText(b []byte) error {
	d, err := hex.DecodeString(string(b))
	*h = d
	return err
}

func corpusDir() string { return filepath.Join(testutil.RepoRoot(), "testdata", "replay") }

func readCase(dir string) (*Case, []sampler.Event, error) {
	b, err := os.ReadFile(filepath.Join(dir, "case.json"))
	if err != nil {
		return nil, nil, err
	}
	var c Case
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, nil, fmt.Errorf("read %s/case.json: %w", dir, err)
	}
	raw, err := readGzip(filepath.Join(dir, "events.jsonl.gz"))
	if err != nil {
		return nil, nil, err
	}
	var events []sampler.Event
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, nil, fmt.Errorf("read %s/events.jsonl.gz line %d: %w", dir, line, err)
		}
		ev := sampler.Event{Proc: e.Proc}
		if e.Sample != nil {
			if e.Sample.Record == nil {
				return nil, nil, fmt.Errorf("read %s/events.jsonl.gz line %d: an empty sample", dir, line)
			}
			ev.Sample = e.Sample.Record
			ev.Sample.StackTop = e.Sample.StackTop
		}
		if (ev.Sample == nil) == (ev.Proc == nil) {
			return nil, nil, fmt.Errorf("read %s/events.jsonl.gz line %d: want one of Sample and Proc", dir, line)
		}
		events = append(events, ev)
	}
	return &c, events, sc.Err()
}

func writeEvents(path string, events []sampler.Event) error {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	enc := json.NewEncoder(zw)
	for _, e := range events {
		ev := Event{Proc: e.Proc}
		if e.Sample != nil {
			ev.Sample = &Sample{Record: e.Sample, StackTop: e.Sample.StackTop}
		}
		if err := enc.Encode(ev); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// procRoot lays out the recorded processes as a /proc for the tracker
// and the perf maps: PID/maps, stat, status, exe, root/PATH for each
// object and root/tmp/perf-NSPID.map.
func procRoot(t testing.TB, dir string, c *Case) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range c.Processes {
		pd := filepath.Join(root, strconv.FormatUint(uint64(p.PID), 10))
		must(t, os.MkdirAll(filepath.Join(pd, "root", "tmp"), 0o755))
		must(t, os.WriteFile(filepath.Join(pd, "maps"), []byte(p.Maps), 0o644))
		// Fields 3 to 9 (state to flags) are what the tracker reads.
		stat := fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 0 0 0 0 0\n", p.PID, p.Comm, p.PID, p.PID)
		must(t, os.WriteFile(filepath.Join(pd, "stat"), []byte(stat), 0o644))
		must(t, os.WriteFile(filepath.Join(pd, "status"), fmt.Appendf(nil, "Name:\t%s\nNSpid:\t%d\n", p.Comm, p.NSPID), 0o644))
		must(t, os.Symlink(p.Exe, filepath.Join(pd, "exe")))
		for _, o := range p.Objects {
			b, err := readGzip(filepath.Join(corpusDir(), o.File))
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(pd, "root", o.Path)
			must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
			must(t, os.WriteFile(dst, b, 0o755))
		}
		if p.PerfMap != "" {
			b, err := os.ReadFile(filepath.Join(dir, p.PerfMap))
			if err != nil {
				t.Fatal(err)
			}
			must(t, os.WriteFile(filepath.Join(pd, "root", "tmp", fmt.Sprintf("perf-%d.map", p.NSPID)), b, 0o644))
		}
	}
	return root
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// replay hands events to a pipeline on a fake source, reading processes
// under proc and kernel symbols from kallsyms, and returns the profile
// as folded stacks. Symbols come from the objects alone: no debug
// directory, no debuginfod, no JVM asked for its perf map.
func replay(t testing.TB, c *Case, events []sampler.Event, proc, kallsyms string) string {
	t.Helper()
	k, err := symbolize.LoadKallsyms(kallsyms)
	if err != nil {
		t.Fatal(err)
	}
	src := pipelinetest.NewSource(len(events))
	cfg := pipeline.Config{Frequency: c.Frequency,
		Symbolization: pipeline.Symbolization{Mode: symbolize.ModeLocal, NoJVMPerfmap: true, OnlyDebugDirs: true},
		Budget:        pipeline.Budget{DWARFSpillDir: t.TempDir()}}
	p, err := pipeline.New(cfg, src, pipeline.Parts{Kernel: collect.KernelFrames(k), ProcRoot: proc, ReadMemory: memoryOf(c)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var end time.Time
	for _, e := range events {
		src.Ch <- e
		if e.Sample != nil && e.Sample.Time.After(end) {
			end = e.Sample.Time
		}
	}
	// Run on an ended context only drains: it stops the source and
	// hands on every event queued, in order.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx, pipeline.Hooks{}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := folded.Write(&out, p.Build(end.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// parseFolded reads folded stacks into counts by stack.
func parseFolded(s string) map[string]int64 {
	m := map[string]int64{}
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		n, err := strconv.ParseInt(l[i+1:], 10, 64)
		if err == nil {
			m[l[:i]] += n
		}
	}
	return m
}

// match is the share of b's samples on a stack that a has as often.
func match(a, b map[string]int64) float64 {
	var same, total int64
	for s, n := range b {
		total += n
		same += min(n, a[s])
	}
	if total == 0 {
		return 0
	}
	return float64(same) / float64(total)
}
