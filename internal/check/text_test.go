package check

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/cli"
)

func TestTextFixtures(t *testing.T) {
	tests := []struct {
		file string
		want []string // rule ids, notes included
		// lines maps a rule id to the line it must be reported on.
		lines map[string]int
	}{
		{file: "build/good.mk", want: []string{}},
		{file: "build/bad-omit.mk", want: []string{"cflags-no-frame-pointer", "cflags-omit-frame-pointer", "ldflags-no-build-id"},
			lines: map[string]int{"cflags-omit-frame-pointer": 1, "ldflags-no-build-id": 2}},
		{file: "build/bad-noflags.mk", want: []string{"cflags-no-frame-pointer", "ldflags-no-build-id", "strip-no-debug-file"},
			lines: map[string]int{"strip-no-debug-file": 5}},
		{file: "build/bad-strip-id.mk", want: []string{"strip-removes-build-id"}, lines: map[string]int{"strip-removes-build-id": 7}},
		{file: "build/go-strip.mk", want: []string{"go-ldflags-strip"}, lines: map[string]int{"go-ldflags-strip": 3}},
		{file: "build/good.Dockerfile", want: []string{}},
		{file: "build/bad.Dockerfile", want: []string{"cflags-no-frame-pointer", "ldflags-no-build-id", "strip-no-debug-file"},
			lines: map[string]int{"strip-no-debug-file": 5}},
		{file: "build/good.bazelrc", want: []string{}},
		{file: "build/bad.bazelrc", want: []string{"cflags-no-frame-pointer", "ldflags-no-build-id", "strip-no-debug-file"}},
		{file: "cmake-good/CMakeLists.txt", want: []string{}},
		// It lacks only the leaf flag: a note, as for a GCC binary.
		{file: "cmake-bad/CMakeLists.txt", want: []string{"ldflags-no-build-id", "leaf-frame-pointer"},
			lines: map[string]int{"leaf-frame-pointer": 3}},
		{file: "meson-good/meson.build", want: []string{}},
		{file: "meson-bad/meson.build", want: []string{"cflags-no-frame-pointer", "cflags-omit-frame-pointer", "ldflags-no-build-id"}},
		{file: "cargo-good/.cargo/config.toml", want: []string{}},
		{file: "cargo-bad/.cargo/config.toml", want: []string{"rustflags-no-frame-pointer"}, lines: map[string]int{"rustflags-no-frame-pointer": 2}},
		{file: "collector/collector-good.yaml", want: []string{"collector-feature-gate"}, lines: map[string]int{"collector-feature-gate": 13}},
		{file: "collector/collector-no-profiles.yaml", want: []string{"collector-feature-gate", "collector-no-profiles-pipeline"},
			lines: map[string]int{"collector-no-profiles-pipeline": 9}},
		{file: "collector/otel-no-otlp.yaml", want: []string{"collector-feature-gate", "collector-profiles-no-otlp"}},
		{file: "collector/otel-http-only.yaml", want: []string{"collector-feature-gate", "collector-otlp-no-grpc"},
			lines: map[string]int{"collector-otlp-no-grpc": 11}},
		{file: "collector/otel-undefined-exporter.yaml", want: []string{"collector-feature-gate", "collector-undefined-component"},
			lines: map[string]int{"collector-undefined-component": 11}},
		{file: "collector/otel-no-service.yaml", want: []string{"collector-feature-gate", "collector-no-profiles-pipeline"}},
		{file: "bpf/good/good.bpf.c", want: []string{}},
		{file: "bpf/bad/bad.bpf.c", want: []string{"bpf-ktime-no-realtime", "bpf-printk-hot-path", "bpf-record-no-trace-context"},
			lines: map[string]int{"bpf-record-no-trace-context": 4, "bpf-printk-hot-path": 16, "bpf-ktime-no-realtime": 14}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			res := run(t, &Checker{}, filepath.Join(fixtures, tt.file))
			if got := ruleSet(res.Findings, true); !slices.Equal(got, tt.want) {
				t.Errorf("rules = %v, want %v\n%+v", got, tt.want, res.Findings)
			}
			for rule, line := range tt.lines {
				found := false
				for _, f := range res.Findings {
					if f.Rule == rule && f.Line == line {
						found = true
					}
				}
				if !found {
					t.Errorf("%s not reported on line %d: %+v", rule, line, res.Findings)
				}
			}
		})
	}
}

func TestBuildSnippets(t *testing.T) {
	tests := []struct {
		name, kind, text string
		want             []string
	}{
		{"bare build-id", "make", "CFLAGS = -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer\nLDFLAGS = -Wl,--build-id\n", []string{}},
		{"continued line", "make", "CFLAGS = -O2 \\\n  -fno-omit-frame-pointer \\\n  -mno-omit-leaf-frame-pointer\nLDFLAGS=-Wl,--build-id=sha1\n", []string{}},
		{"commented flag does not count", "make", "CFLAGS = -O2 # -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer\nLDFLAGS=-Wl,--build-id=sha1\n", []string{"cflags-no-frame-pointer"}},
		{"append", "make", "CFLAGS = -O2\nCFLAGS += -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer\nLDFLAGS=-Wl,--build-id=sha1\n", []string{}},
		{"no-omit is not omit", "make", "CFLAGS = -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer\nLDFLAGS=-Wl,--build-id=sha1\n", []string{}},
		{"leaf omit", "make", "CFLAGS = -fno-omit-frame-pointer -momit-leaf-frame-pointer\nLDFLAGS=-Wl,--build-id=sha1\n", []string{"cflags-omit-frame-pointer", "leaf-frame-pointer"}},
		// One model with binaries: a missing leaf flag is recovered by the
		// unwinder (a note) unless the unwind tables are off (a warning).
		{"no leaf flag", "make", "CFLAGS = -O2 -fno-omit-frame-pointer\nLDFLAGS=-Wl,--build-id=sha1\n", []string{"leaf-frame-pointer"}},
		{"no leaf flag, no unwind tables", "make", "CFLAGS = -O2 -fno-omit-frame-pointer -fno-asynchronous-unwind-tables\nLDFLAGS=-Wl,--build-id=sha1\n", []string{"leaf-frame-pointer"}},
		{"no flag at all", "make", "CFLAGS = -O2\nLDFLAGS=-Wl,--build-id=sha1\n", []string{"cflags-no-frame-pointer"}},
		{"go only makefile", "make", "all:\n\tgo build ./...\n", []string{}},
		{"bpf compile only", "make", "x.o: x.bpf.c\n\tclang-19 -O2 -g -target bpf -c $< -o $@\n", []string{}},
		{"uuid build id", "make", "CFLAGS = -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer\nLDFLAGS = -Wl,--build-id=uuid\n", []string{"build-id-not-sha1"}},
		{"ld -s", "make", "CFLAGS = -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer\nLDFLAGS = -s -Wl,--build-id=sha1\n", []string{"strip-no-debug-file"}},
		{"strip with debug kept", "make", "CFLAGS = -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer\nLDFLAGS = -Wl,--build-id\nx:\n\tobjcopy --only-keep-debug x x.debug\n\tstrip x\n", []string{}},
		{"objcopy removes note", "docker", "RUN objcopy --remove-section=.note.gnu.build-id /bin/app\n", []string{"strip-removes-build-id"}},
		{"go -w", "docker", "RUN go build -ldflags=-w -o /app .\n", []string{"go-ldflags-strip"}},
		{"cargo bare force", "cargo", "[build]\nrustflags = \"-C force-frame-pointers\"\n", []string{}},
		{"cargo force off", "cargo", "[build]\nrustflags = [\"-C\", \"force-frame-pointers=no\"]\n", []string{"rustflags-no-frame-pointer"}},
		{"cmake per target", "cmake", "project(x C)\ntarget_compile_options(x PRIVATE -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer)\ntarget_link_options(x PRIVATE -Wl,--build-id=sha1)\n", []string{}},
		{"cmake no languages", "cmake", "cmake_minimum_required(VERSION 3.20)\n", []string{}},
		{"bazel java only", "bazel", "build --java_runtime_version=17\n", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ruleSet(checkBuildFile(fileKind(tt.kind), "x", tt.text), true)
			if !slices.Equal(got, tt.want) {
				t.Errorf("rules = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLeafFlagSeverity: build files and binaries share one severity
// model for leaf frames: a note where the unwinder recovers the caller
// from the unwind tables, a warning where the tables are off, an error
// only when calling functions lose their frame.
func TestLeafFlagSeverity(t *testing.T) {
	tests := []struct {
		cflags string
		want   Severity
	}{
		{"-O2 -fno-omit-frame-pointer", SevNote},
		{"-O2 -fno-omit-frame-pointer -fno-asynchronous-unwind-tables", SevWarning},
		{"-O2 -mno-omit-leaf-frame-pointer", SevError},
	}
	for _, tt := range tests {
		fs := checkBuildFile(kindMake, "x", "CFLAGS = "+tt.cflags+"\nLDFLAGS=-Wl,--build-id=sha1\n")
		if len(fs) != 1 || fs[0].Severity != tt.want {
			t.Errorf("CFLAGS = %s: %+v, want one %s", tt.cflags, fs, tt.want)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := map[string]fileKind{
		"Makefile": kindMake, "a/rules.mk": kindMake, "GNUmakefile": kindMake,
		"Dockerfile": kindDocker, "Dockerfile.agent": kindDocker, "x.Dockerfile": kindDocker,
		"CMakeLists.txt": kindCMake, "meson.build": kindMeson, "r/.cargo/config.toml": kindCargo,
		"config.toml": "", ".bazelrc": kindBazel, "collector.yaml": kindCollector,
		"deploy/otel-collector.yml": kindCollector, "values.yaml": "", "bpf/x.bpf.c": kindBPF, "x.c": "",
	}
	for path, want := range tests {
		if got := classify(path); got != want {
			t.Errorf("classify(%q) = %q, want %q", path, got, want)
		}
	}
}

// A walk reads build files and configs but skips testdata and hidden
// directories, which hold deliberately bad examples, and installed
// packages (a virtualenv's site-packages), which are dependencies.
func TestWalk(t *testing.T) {
	res := run(t, &Checker{}, filepath.Join(fixtures, "tree"))
	want := []string{filepath.Join(fixtures, "tree/Makefile"), filepath.Join(fixtures, "tree/deploy/collector.yaml")}
	if !slices.Equal(res.Targets, want) {
		t.Errorf("targets = %v, want %v", res.Targets, want)
	}
	if n := res.violations(); n != 0 {
		t.Errorf("violations = %d: %+v", n, res.Findings)
	}
}

func TestSARIF(t *testing.T) {
	res := run(t, &Checker{}, filepath.Join(fixtures, "build/bad-omit.mk"), filepath.Join(fixtures, "collector/collector-good.yaml"))
	var buf bytes.Buffer
	if err := res.write(&buf, "sarif"); err != nil {
		t.Fatal(err)
	}
	var log struct {
		Schema  string `json:"$schema"`
		Version string `json:"version"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name    string `json:"name"`
					Version string `json:"version"`
					Rules   []struct {
						ID string `json:"id"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string `json:"ruleId"`
				RuleIndex int    `json:"ruleIndex"`
				Level     string `json:"level"`
				Message   struct {
					Text string `json:"text"`
				} `json:"message"`
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct {
							URI string `json:"uri"`
						} `json:"artifactLocation"`
						Region *struct {
							StartLine int `json:"startLine"`
						} `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(buf.Bytes(), &log); err != nil {
		t.Fatal(err)
	}
	if log.Version != "2.1.0" || !strings.Contains(log.Schema, "sarif-2.1.0") || len(log.Runs) != 1 {
		t.Fatalf("header: version=%q schema=%q runs=%d", log.Version, log.Schema, len(log.Runs))
	}
	run := log.Runs[0]
	if v := run.Tool.Driver.Version; v != cli.Info().Version || v == "" {
		t.Errorf("driver.version = %q, want the build's %q", v, cli.Info().Version)
	}
	if len(run.Tool.Driver.Rules) != len(Rules) || run.Tool.Driver.Name == "" {
		t.Errorf("driver has %d rules, want %d", len(run.Tool.Driver.Rules), len(Rules))
	}
	if len(run.Results) != len(res.Findings) {
		t.Fatalf("%d results for %d findings", len(run.Results), len(res.Findings))
	}
	for _, r := range run.Results {
		if run.Tool.Driver.Rules[r.RuleIndex].ID != r.RuleID {
			t.Errorf("ruleIndex %d names %s, result says %s", r.RuleIndex, run.Tool.Driver.Rules[r.RuleIndex].ID, r.RuleID)
		}
		if r.Level != "error" && r.Level != "warning" && r.Level != "note" {
			t.Errorf("level %q", r.Level)
		}
		if r.Message.Text == "" || len(r.Locations) != 1 {
			t.Errorf("result %s: message %q, %d locations", r.RuleID, r.Message.Text, len(r.Locations))
			continue
		}
		loc := r.Locations[0].PhysicalLocation
		if !strings.HasPrefix(loc.ArtifactLocation.URI, "../../testdata/check/") {
			t.Errorf("uri %q", loc.ArtifactLocation.URI)
		}
		if r.RuleID == "cflags-omit-frame-pointer" && (loc.Region == nil || loc.Region.StartLine != 1) {
			t.Errorf("cflags-omit-frame-pointer region = %+v, want line 1", loc.Region)
		}
	}
}

func TestSARIFURI(t *testing.T) {
	tests := map[string]string{
		"/usr/lib/x86_64-linux-gnu/libc.so.6": "file:///usr/lib/x86_64-linux-gnu/libc.so.6",
		"deploy/collector.yaml":               "deploy/collector.yaml",
		"dir with space/Makefile":             "dir%20with%20space/Makefile",
	}
	for in, want := range tests {
		if got := sarifURI(in); got != want {
			t.Errorf("sarifURI(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestExclude: --exclude leaves out a directory of a walk, files by glob,
// and the mapped files of a process under a prefix, and the report says
// what it left out.
func TestExclude(t *testing.T) {
	tree := filepath.Join(fixtures, "tree")
	res := run(t, &Checker{Exclude: []string{filepath.Join(tree, "deploy")}}, tree)
	if want := []string{filepath.Join(tree, "Makefile")}; !slices.Equal(res.Targets, want) || !slices.Equal(res.Excluded, []string{filepath.Join(tree, "deploy")}) {
		t.Errorf("directory: targets %v, excluded %v", res.Targets, res.Excluded)
	}
	res = run(t, &Checker{Exclude: []string{"*.yaml"}}, tree)
	if want := []string{filepath.Join(tree, "Makefile")}; !slices.Equal(res.Targets, want) || len(res.Excluded) != 1 {
		t.Errorf("glob: targets %v, excluded %v", res.Targets, res.Excluded)
	}
	var out, errb bytes.Buffer
	if code := Main([]string{tree, "--exclude", filepath.Join(tree, "deploy")}, &out, &errb); code != 0 || !strings.HasSuffix(out.String(), "in 1 target (1 excluded by --exclude)\n") {
		t.Errorf("Main: exit %d\n%s%s", code, out.String(), errb.String())
	}
	// Everything excluded is not "0 targets": the user asked for it.
	if code := Main([]string{"--exclude", "*", tree}, &out, &errb); code != 0 {
		t.Errorf("all excluded: exit %d\n%s", code, errb.String())
	}

	// A process: its libc is left out, its executable kept.
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	pid := strconv.Itoa(sleeper.Process.Pid)
	// The loader maps libc a moment after the exec.
	for deadline := time.Now().Add(5 * time.Second); ; {
		maps, _ := os.ReadFile("/proc/" + pid + "/maps")
		if bytes.Contains(maps, []byte("/libc.so")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep maps no libc:\n%s", maps)
		}
		time.Sleep(10 * time.Millisecond)
	}
	all := run(t, &Checker{}, pid)
	libs := 0
	for _, tg := range all.Targets {
		if strings.Contains(tg, "/libc.so") {
			libs++
		}
	}
	res = run(t, &Checker{Exclude: []string{"/usr/lib", "/lib"}}, pid)
	for _, tg := range res.Targets {
		if strings.Contains(tg, "/libc.so") {
			t.Errorf("libc still checked: %v", res.Targets)
		}
	}
	if libs == 0 || len(res.Excluded) < libs || len(res.Targets) != len(all.Targets)-len(res.Excluded) {
		t.Errorf("without exclude %v; with: targets %v, excluded %v", all.Targets, res.Targets, res.Excluded)
	}
}

// TestCollectorByContent: a collector config named on the command line
// under any name is recognised by what it holds; other YAML is refused.
func TestCollectorByContent(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(filepath.Join(fixtures, "collector", "otel-http-only.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(dir, "my-config.yaml")
	other := filepath.Join(dir, "values.yaml")
	os.WriteFile(mine, good, 0o644)
	os.WriteFile(other, []byte("replicas: 2\nservice:\n  port: 80\n"), 0o644)
	res := run(t, &Checker{}, mine)
	if got := ruleSet(res.Findings, false); !slices.Equal(got, []string{"collector-otlp-no-grpc"}) {
		t.Errorf("my-config.yaml: %v", got)
	}
	if _, err := (&Checker{}).Run([]string{other}); err == nil || !strings.Contains(err.Error(), "not an ELF file, build file, collector config") {
		t.Errorf("values.yaml: %v", err)
	}
}
