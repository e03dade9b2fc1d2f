package agent

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Binaries and fixtures shared by the tests that run processes: the
// spanprof binary and the test collector (test/collector) are built once
// per run; SPANPROF_TESTCOL names a prebuilt collector instead.

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func run(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// testCollector is the test collector binary, built once per test run.
var testCollector struct {
	once      sync.Once
	dir, path string
	err       error
}

// spanprofBin is the spanprof binary, built once per test run.
var spanprofBin struct {
	once      sync.Once
	dir, path string
	err       error
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{testCollector.dir, spanprofBin.dir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

func buildSpanprof(t *testing.T, root string) string {
	t.Helper()
	b := &spanprofBin
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "spanprof-agent-test"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "spanprof")
		cmd := exec.Command("go", "build", "-o", b.path, "./cmd/spanprof")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build spanprof: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// buildTestCollector returns the path of the test collector binary:
// SPANPROF_TESTCOL, or test/collector built into a temporary directory.
func buildTestCollector(t *testing.T, root string) string {
	t.Helper()
	if p := os.Getenv("SPANPROF_TESTCOL"); p != "" {
		return p
	}
	tc := &testCollector
	tc.once.Do(func() {
		if tc.dir, tc.err = os.MkdirTemp("", "spanprof-testcol"); tc.err != nil {
			return
		}
		tc.path = filepath.Join(tc.dir, "spanprof-testcol")
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", tc.path, ".")
		cmd.Dir = filepath.Join(root, "test", "collector")
		if out, err := cmd.CombinedOutput(); err != nil {
			tc.err = fmt.Errorf("build test collector: %v\n%s", err, out)
			return
		}
		t.Logf("built the test collector in %v", time.Since(start).Round(time.Second))
	})
	if tc.err != nil {
		t.Fatal(tc.err)
	}
	return tc.path
}

// syncBuffer collects a process's output for inspection while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startReady starts a fixture that prints "ready PID" or "pid PID" first.
func startReady(t *testing.T, path string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !(strings.HasPrefix(line, "ready ") || strings.HasPrefix(line, "pid ")) {
		t.Fatalf("%s: first line %q, %v", path, line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return cmd
}

func gnuBuildID(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		t.Fatalf("%s has no GNU build ID", path)
	}
	b, err := s.Data()
	if err != nil || len(b) < 16 {
		t.Fatalf("read build ID note: %v", err)
	}
	namesz := binary.LittleEndian.Uint32(b[0:4])
	descsz := binary.LittleEndian.Uint32(b[4:8])
	off := 12 + (namesz+3)&^3
	return hex.EncodeToString(b[off : off+descsz])
}

// e2eSample is one sample resolved through its batch's dictionary.
type e2eSample struct {
	kind        string // sample type: samples or off_cpu
	attrs       map[string]string
	resource    map[string]any
	frames      []string
	times       []uint64
	values      []int64
	trace, span string
	mappings    map[string]string // file name → build ID attribute
}

func readBatches(t *testing.T, path string) (batches int, out []e2eSample) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		pd, err := (&pprofile.JSONUnmarshaler{}).UnmarshalProfiles(line)
		if err != nil {
			t.Fatalf("unmarshal batch: %v", err)
		}
		batches++
		out = appendSamples(out, pd)
	}
	return batches, out
}

// appendSamples decodes the samples of one batch: frames leaf first.
func appendSamples(out []e2eSample, pd pprofile.Profiles) []e2eSample {
	d := pd.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	for _, rp := range pd.ResourceProfiles().All() {
		res := rp.Resource().Attributes().AsRaw()
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				kind := str(prof.SampleType().TypeStrindex())
				for _, s := range prof.Samples().All() {
					es := e2eSample{kind: kind, attrs: map[string]string{}, resource: res,
						times: s.TimestampsUnixNano().AsRaw(), values: s.Values().AsRaw(), mappings: map[string]string{}}
					for _, ai := range s.AttributeIndices().All() {
						kv := d.AttributeTable().At(int(ai))
						es.attrs[str(kv.KeyStrindex())] = kv.Value().AsString()
					}
					for _, li := range d.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
						loc := d.LocationTable().At(int(li))
						for _, ln := range loc.Lines().All() {
							es.frames = append(es.frames, str(d.FunctionTable().At(int(ln.FunctionIndex())).NameStrindex()))
						}
						m := d.MappingTable().At(int(loc.MappingIndex()))
						for _, ai := range m.AttributeIndices().All() {
							kv := d.AttributeTable().At(int(ai))
							if str(kv.KeyStrindex()) == "process.executable.build_id.gnu" {
								es.mappings[filepath.Base(str(m.FilenameStrindex()))] = kv.Value().AsString()
							}
						}
					}
					if li := s.LinkIndex(); li != 0 {
						l := d.LinkTable().At(int(li))
						tid, sid := l.TraceID(), l.SpanID()
						es.trace, es.span = hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:])
					}
					out = append(out, es)
				}
			}
		}
	}
	return out
}
