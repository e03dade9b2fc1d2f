package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spanprof/spanprof/internal/debuginfod/debuginfodtest"
	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/testutil"
)

// symFixture is a binary of testdata/symbolize, built on first use.
func symFixture(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(testutil.Fixtures(t, "symbolize", nil), "build", name)
}

func readProfile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := otlp.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startLoop runs a fixture that needs no ready line (chain ITERATIONS).
func startLoop(t *testing.T, path string, args ...string) int {
	t.Helper()
	cmd := exec.Command(path, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// framesIn returns the frames of pid's samples that lie in the mapping of
// file base, with the sample count.
func framesIn(p *profile.Profile, pid uint32, base string) (frames []profile.Frame, samples int) {
	for _, s := range p.Samples {
		if s.PID != pid {
			continue
		}
		in := false
		for _, f := range s.Frames {
			if f.Mapping != nil && filepath.Base(f.Mapping.Path) == base {
				frames = append(frames, f)
				in = true
			}
		}
		if in {
			samples++
		}
	}
	return frames, samples
}

// TestRecordSymbolizeModes profiles the stripped chain fixture and checks
// what each way of finding its symbols gives: never a wrong name, and
// the build ID in the mapping whether or not names were found.
func TestRecordSymbolizeModes(t *testing.T) {
	testutil.RequireRoot(t)
	stripped := symFixture(t, "chain-gcc-stripped")
	debug := symFixture(t, "chain-gcc.debug")
	out, err := exec.Command("readelf", "-n", stripped).Output()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(out), "Build ID: ")
	id := strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0])
	debugDir := t.TempDir()
	data, _ := os.ReadFile(debug)
	os.MkdirAll(filepath.Join(debugDir, ".build-id", id[:2]), 0o755)
	os.WriteFile(filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug"), data, 0o644)
	serve := t.TempDir()
	os.WriteFile(filepath.Join(serve, "chain-gcc.debug"), data, 0o644)
	srv := debuginfodtest.Start(t, serve, id)

	chainNames := map[string]bool{"leaf": true, "leaf_stack": true, "leaf_nofp": true, "a": true, "b": true,
		"c": true, "d": true, "main": true, "spanprof::test::widen(int)": true}
	tests := []struct {
		name      string
		bin       string
		args      []string
		nsenter   bool
		wantNames bool
		// wantLine is in the line about unnamed frames ("" for no line).
		wantLine string
	}{
		{"stripped, local, no debug file", stripped, []string{"--debug-dir", t.TempDir()}, false, false, "set DEBUGINFOD_URLS"},
		{"stripped, --debug-dir with .build-id", stripped, []string{"--debug-dir", debugDir}, false, true, ""},
		{"stripped, full, debuginfod", stripped, []string{"--symbolize=full", "--debuginfod-wait=60s"}, true, true, ""},
		// DEBUGINFOD_URLS set and no --symbolize: debuginfod is asked.
		{"stripped, default, DEBUGINFOD_URLS", stripped, []string{"--debuginfod-wait=60s"}, true, true, ""},
		{"stripped, local, DEBUGINFOD_URLS", stripped, []string{"--symbolize=local"}, true, false, "--symbolize=local does not ask"},
		{"unstripped, none", symFixture(t, "chain-gcc"), []string{"--symbolize=none"}, false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := startLoop(t, tt.bin, "100000000")
			outPath := filepath.Join(t.TempDir(), "p.otlp.json")
			args := append([]string{"record", "--pid", strconv.Itoa(pid), "--duration", "2s", "--frequency", "499", "--output", outPath}, tt.args...)
			cmd := exec.Command(binPath, args...)
			if tt.nsenter {
				cmd = exec.Command("nsenter", append([]string{"--net=" + srv.NetNS, binPath}, args...)...)
				cmd.Env = append(os.Environ(), "DEBUGINFOD_URLS="+srv.URL, "XDG_CACHE_HOME="+t.TempDir())
			}
			stderr, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("spanprof %v: %v\n%s", args, err, stderr)
			}
			p := readProfile(t, outPath)
			frames, n := framesIn(p, uint32(pid), filepath.Base(tt.bin))
			if n < 100 {
				t.Fatalf("only %d samples in the fixture\n%s", n, stderr)
			}
			named, lines, crt, byStart := 0, 0, 0, 0
			startName := regexp.MustCompile(`^` + regexp.QuoteMeta(filepath.Base(tt.bin)) + `\+0x[0-9a-f]+$`)
			for _, f := range frames {
				if f.Mapping.BuildID != id {
					t.Fatalf("mapping build ID %q, want %s", f.Mapping.BuildID, id)
				}
				if f.Function == "" {
					continue
				}
				if startName.MatchString(f.Function) {
					// Named by its function's start in .eh_frame only
					// (TestRecordStrippedBinaryAggregates checks where).
					byStart++
					continue
				}
				named++
				if f.Function == "_start" {
					// The C runtime's entry (crt1.o), linked into the
					// fixture: stacks reach it through glibc's
					// __libc_start_call_main. It has no chain.c line.
					crt++
					continue
				}
				if !chainNames[f.Function] {
					t.Errorf("frame named %q: not a function of the fixture", f.Function)
				}
				if f.Line > 0 && strings.HasSuffix(f.File, "chain.c") {
					lines++
				}
			}
			t.Logf("%d samples, %d frames in the fixture, %d named, %d with chain.c:line", n, len(frames), named, lines)
			if tt.wantNames && (named < len(frames)*9/10 || lines < (named-crt)*9/10) {
				t.Errorf("%d of %d frames named, %d with lines; want ≥ 90%%\n%s", named, len(frames), lines, stderr)
			}
			if !tt.wantNames && named > 0 {
				t.Errorf("%d frames named; want module+offset only", named)
			}
			if tt.wantLine != "" && byStart == 0 {
				t.Errorf("no frame named by its function's start in .eh_frame")
			}
			line := ""
			for _, l := range strings.Split(string(stderr), "\n") {
				if strings.Contains(l, "without symbols") {
					line = l
				}
			}
			base := filepath.Base(tt.bin)
			switch {
			case tt.wantLine == "" && strings.Contains(line, base):
				t.Errorf("unnamed-frames line names the fixture, whose frames were named: %q", line)
			case tt.wantLine != "" && !(strings.Contains(line, tt.wantLine) && strings.Contains(line, base)):
				t.Errorf("want a line naming %s with %q, got %q\n%s", base, tt.wantLine, line, stderr)
			}
		})
	}
}

// TestRecordJIT profiles a fixture running code it copied into anonymous
// executable memory and named in /tmp/perf-PID.map.
func TestRecordJIT(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := startProgram(t, symFixture(t, "jit"), "8")
	pid := cmd.Process.Pid
	outPath := filepath.Join(t.TempDir(), "p.otlp.json")
	spanprof(t, "record", "--pid", strconv.Itoa(pid), "--duration", "3s", "--frequency", "499", "--output", outPath)
	p := readProfile(t, outPath)
	counts := map[string]int{}
	total := 0
	for _, s := range p.Samples {
		if s.PID != uint32(pid) || len(s.Frames) == 0 {
			continue
		}
		total++
		var leaf *profile.Frame
		for i := range s.Frames {
			if f := &s.Frames[i]; f.Mapping != nil && !f.Mapping.Kernel {
				leaf = f
				break
			}
		}
		if leaf == nil || leaf.Mapping.Path != "[anon]" {
			continue
		}
		name := leaf.Function
		if name == "" {
			name = "(unnamed)"
		}
		counts[name]++
	}
	t.Logf("%d samples: leaf in JIT code %v", total, counts)
	if counts["LazyCompile:*hotLoop jit.js:10"] < 20 || counts["warmLoop"] < 10 {
		t.Errorf("JIT functions named in too few samples: %v of %d", counts, total)
	}
	if counts["(unnamed)"] < 10 {
		t.Errorf("code missing from the perf map got a name: %v", counts)
	}
	for name := range counts {
		if name != "LazyCompile:*hotLoop jit.js:10" && name != "warmLoop" && name != "(unnamed)" {
			t.Errorf("JIT frame named %q", name)
		}
	}
}
