package spanprof

import (
	"bufio"
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The data flows one way (CONTRIBUTING.md, docs/dataflow.md): kernel → sampler →
// unwinding and symbolization → collector → profile → export, put
// together by the commands. A package may import packages of its own
// stage or of an earlier one, never of a later one: a stage that needs
// something of a later one's asks for it through a small interface of its
// own. Libraries with no place in the flow (base) import only each other.
//
// Only the files a build compiles count; tests may use a later stage as
// their oracle (the unwinder's tests name functions with the symbolizer).

// Stages, in the order of the flow.
const (
	base      = iota // libraries with no place in the flow
	kernel           // the eBPF programs and their generated types
	sampler          // loading, ring reading, decoding; the kernel-side context configuration
	process          // process and mapping tracking
	unwinding        // CFI and Go SP-delta tables, used while a sample is added
	symbols          // names of addresses: ELF, DWARF, kallsyms, JIT maps
	collector        // records to profile samples; the goroutine-wait sampler
	model            // the profile model and its aggregation
	export           // encoders, files, the web UI
	command          // the pipeline's construction, the agent, the commands
	harness          // benches and out-of-package tests: import anything, imported by nothing
)

var stageNames = []string{"base", "kernel", "sampler", "process", "unwinding", "symbols",
	"collector", "model", "export", "command", "harness"}

// stages assigns each package (by path in the module, the longest prefix
// wins) its stage. A package of no stage fails the test: place it.
var stages = map[string]int{
	"internal/cli":               base,
	"internal/clock":             base,
	"internal/debuginfod":        base,
	"internal/elfmap":            base,
	"internal/elfmutate":         base,
	"internal/gopclntab":         base,
	"internal/jvm":               base,
	"internal/perfmap":           base,
	"internal/tracectx":          base,
	"internal/gowait/gowaittest": base,
	"internal/testutil":          base,

	"bpf": kernel,

	"internal/sampler":               sampler,
	"internal/correlate":             sampler,
	"internal/pipeline/pipelinetest": sampler,

	"internal/proc": process,

	"internal/unwind": unwinding,

	"internal/symbolize": symbols,
	"internal/jit":       symbols,

	"internal/collect": collector,
	"internal/gowait":  collector,

	"internal/profile": model,

	"internal/export": export,
	"internal/web":    export,

	"internal/pipeline": command,
	"internal/agent":    command,
	"internal/check":    command,
	"cmd":               command,

	"bench": harness,
	"test":  harness,
}

// handOff lists the imports of a later stage the design has: a stage that
// hands its values over in the next stage's types.
var handOff = map[[2]string]string{
	{"internal/collect", "internal/profile"}: "the collector builds the profile's samples and frames",
	{"internal/gowait", "internal/profile"}:  "the goroutine-wait sampler builds profile samples",
}

// TestImportsFollowFlow fails on an import of a later stage, for the
// linux/amd64 and linux/arm64 builds.
func TestImportsFollowFlow(t *testing.T) {
	module := modulePath(t)
	for _, arch := range []string{"amd64", "arm64"} {
		graph, err := importGraph(".", module, arch)
		if err != nil {
			t.Fatal(err)
		}
		if len(graph) < 10 {
			t.Fatalf("%s: read only %d packages, want the module's", arch, len(graph))
		}
		for _, v := range checkFlow(graph) {
			t.Errorf("%s: %s", arch, v)
		}
	}
}

// maxCommandImports bounds the internal packages a command imports: a
// command speaks to the pipeline (internal/pipeline), which assembles the
// stages and runs the loop over them, and to the packages of its own
// output, not to the stages themselves (CONTRIBUTING.md, "Layout").
const maxCommandImports = 6

// commands are the packages maxCommandImports bounds.
var commands = []string{"cmd/spanprof", "internal/agent"}

// TestCommandsImportFewPackages fails when a command imports more than
// maxCommandImports internal packages, counted from its Go files of the
// linux/amd64 and linux/arm64 builds (tests not counted).
func TestCommandsImportFewPackages(t *testing.T) {
	module := modulePath(t)
	for _, arch := range []string{"amd64", "arm64"} {
		graph, err := importGraph(".", module, arch)
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range commands {
			imps, ok := graph[pkg]
			if !ok {
				t.Fatalf("%s: no package %s", arch, pkg)
			}
			internal := internalImports(imps)
			t.Logf("%s: %s imports %d internal packages: %v", arch, pkg, len(internal), internal)
			if len(internal) > maxCommandImports {
				t.Errorf("%s: %s imports %d internal packages, more than %d: %v; reach the stages through internal/pipeline",
					arch, pkg, len(internal), maxCommandImports, internal)
			}
		}
	}
}

// internalImports are the imports of the module's internal packages
// among imps.
func internalImports(imps []string) []string {
	var out []string
	for _, imp := range imps {
		if strings.HasPrefix(imp, "internal/") {
			out = append(out, imp)
		}
	}
	slices.Sort(out)
	return out
}

// TestCheckFlowCatches checks the checker on imports it must refuse and
// accept: the ones this layout once had and the ones it keeps.
func TestCheckFlowCatches(t *testing.T) {
	tests := []struct {
		name  string
		graph map[string][]string
		bad   int
	}{
		{"unwind imports symbolize", map[string][]string{"internal/unwind": {"internal/symbolize"}}, 1},
		{"symbolize imports profile", map[string][]string{"internal/symbolize": {"internal/profile"}}, 1},
		{"a base library imports the model", map[string][]string{"internal/tracectx": {"internal/profile"}}, 1},
		{"the model imports an exporter", map[string][]string{"internal/profile": {"internal/export/otlp"}}, 1},
		{"a product package imports a test helper", map[string][]string{"internal/collect": {"test/truth"}}, 1},
		{"a package of no stage", map[string][]string{"internal/newthing": nil}, 1},
		{"the flow's own imports", map[string][]string{
			"internal/collect":   {"internal/sampler", "internal/proc", "internal/unwind", "internal/symbolize", "internal/profile", "internal/perfmap"},
			"internal/unwind":    {"internal/gopclntab"},
			"internal/symbolize": {"internal/gopclntab", "internal/debuginfod"},
			"internal/export":    {"internal/profile", "internal/export/otlp"},
			"cmd/spanprof":       {"internal/agent", "internal/web/live"},
		}, 0},
		{"the sampler imports the tracker and the model", map[string][]string{"internal/sampler": {"internal/profile", "internal/proc", "bpf"}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if v := checkFlow(tt.graph); len(v) != tt.bad {
				t.Errorf("checkFlow = %q, want %d violations", v, tt.bad)
			}
		})
	}
}

// checkFlow returns one line per import against the flow, and per
// package without a stage.
func checkFlow(graph map[string][]string) []string {
	var out []string
	for pkg, imps := range graph {
		from, ok := stageOf(pkg)
		if !ok {
			out = append(out, fmt.Sprintf("%s has no stage: add it to stages in flow_test.go", pkg))
			continue
		}
		for _, imp := range imps {
			e := [2]string{pkg, imp}
			if _, ok := handOff[e]; ok {
				continue
			}
			to, ok := stageOf(imp)
			if !ok {
				continue // reported as a package of its own
			}
			if to > from {
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s), a later stage",
					pkg, stageNames[from], imp, stageNames[to]))
			}
		}
	}
	slices.Sort(out)
	return out
}

// stageOf finds the stage of pkg by its longest prefix in stages.
func stageOf(pkg string) (int, bool) {
	best, stage := -1, 0
	for prefix, s := range stages {
		if (pkg == prefix || strings.HasPrefix(pkg, prefix+"/")) && len(prefix) > best {
			best, stage = len(prefix), s
		}
	}
	return stage, best >= 0
}

// importGraph reads the module's packages under root with the build
// constraints of linux/arch and returns, for each package path relative to
// the module, its imports of other packages of the module. It parses
// import clauses only: no go command, no network.
func importGraph(root, module, arch string) (map[string][]string, error) {
	ctx := build.Default
	ctx.GOOS, ctx.GOARCH, ctx.CgoEnabled = "linux", arch, true
	graph := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if path != root {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module (sdk/go)
			}
		}
		pkg, err := ctx.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return fmt.Errorf("read package %s: %w", path, err)
		}
		rel := filepath.ToSlash(path)
		var imps []string
		for _, imp := range pkg.Imports {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok {
				imps = append(imps, r)
			}
		}
		if rel != "." {
			graph[rel] = imps
		}
		return nil
	})
	return graph, err
}

// modulePath reads the module line of go.mod.
func modulePath(t *testing.T) string {
	t.Helper()
	f, err := os.Open("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	t.Fatal("go.mod has no module line")
	return ""
}
