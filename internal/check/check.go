// Package check verifies that binaries, processes and build files keep
// frame pointers, build IDs and trace-context publishing, so a profile
// taken by spanprof has whole stacks, symbols and span links.
package check

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spanprof/spanprof/internal/cli"
	"github.com/spanprof/spanprof/internal/tracectx"
)

// Main runs `spanprof check` with args and returns the exit code: 0 when
// no error or warning was found, 1 on a violation or bad usage.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spanprof check", flag.ContinueOnError)
	format := fs.String("format", "text", "output format: text, json or sarif")
	var ignore []string
	fs.Func("ignore", "comma-separated rule ids to drop", func(s string) error {
		ignore = append(ignore, s)
		return nil
	})
	var exclude []string
	fs.Func("exclude", "leave out `PATH` (a file, a directory and what is under it, or a glob); repeatable", func(s string) error {
		if _, err := filepath.Match(s, ""); err != nil {
			return fmt.Errorf("bad pattern %q: %w", s, err)
		}
		exclude = append(exclude, filepath.Clean(s))
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: spanprof check [--format text|json|sarif] [--ignore RULE,...] [--exclude PATH]... PATH|PID...")
		fs.PrintDefaults()
	}
	targets, err := parseInterspersed(fs, args, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "spanprof check: %v\n", err)
		return 1
	}
	if *format != "text" && *format != "json" && *format != "sarif" {
		fmt.Fprintf(stderr, "spanprof check: unknown --format %q (use text, json or sarif)\n", *format)
		return 1
	}
	ign, err := parseIgnore(ignore)
	if err != nil {
		fmt.Fprintf(stderr, "spanprof check: --ignore: %v\n", err)
		return 1
	}
	if len(targets) == 0 {
		fmt.Fprintln(stderr, "spanprof check: name at least one PATH or PID to check")
		return 1
	}
	c := &Checker{Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), Exclude: exclude}
	res, err := c.Run(targets)
	if err != nil {
		fmt.Fprintf(stderr, "spanprof check: %v\n", err)
		return 1
	}
	if len(res.Targets) == 0 && len(res.Excluded) == 0 {
		// A CI job pointed at the wrong directory must not pass.
		fmt.Fprintf(stderr, "spanprof check: 0 targets: no build file, collector config or *.bpf.c under %s\n", strings.Join(targets, " "))
		return 1
	}
	res = res.without(ign)
	if err := res.write(stdout, *format); err != nil {
		fmt.Fprintf(stderr, "spanprof check: write report: %v\n", err)
		return 1
	}
	if res.violations() > 0 {
		return 1
	}
	return 0
}

// parseInterspersed parses flags wherever they stand among the targets
// ("check . --format json" as well as "check --format json ."); after
// "--" every argument is a target.
func parseInterspersed(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	var targets []string
	for {
		if err := cli.Parse(fs, args, stdout); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return targets, nil
		}
		// fs.Parse consumed a "--" when rest follows one: everything is a target.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(targets, rest...), nil
		}
		targets = append(targets, rest[0])
		args = rest[1:]
	}
}

// Checker holds the settings of one run. The zero value checks the real
// system; tests point the roots at fixtures.
type Checker struct {
	// ProcRoot is /proc unless set.
	ProcRoot string
	// DebugRoot is /usr/lib/debug unless set.
	DebugRoot string
	// Log receives problems that do not stop the run.
	Log *slog.Logger
	// Exclude lists paths (prefixes of whole path elements, or globs)
	// left out of walks and of the files processes map.
	Exclude []string

	bpf   bpfLinter
	elfs  map[string]bool // mapped files already reported
	cache map[string]*elfInfo
}

// Result is the outcome of a run: every target examined and every finding.
type Result struct {
	Targets  []string
	Findings []Finding
	// Excluded are the paths --exclude left out, so the report says so.
	Excluded []string
}

// excluded reports whether path matches an --exclude entry: the entry
// itself, anything under it, or a glob match of the whole path or of
// its base name.
func (c *Checker) excluded(path string) bool {
	path = filepath.Clean(path)
	for _, e := range c.Exclude {
		if path == e || strings.HasPrefix(path, e+"/") || e == "/" {
			return true
		}
		if ok, _ := filepath.Match(e, path); ok {
			return true
		}
		if ok, _ := filepath.Match(e, filepath.Base(path)); ok && !strings.Contains(e, "/") {
			return true
		}
	}
	return false
}

// Run checks every argument. An argument that is all digits and names no
// file is a PID. A bad argument (missing path, unknown file type, process
// gone) stops the run with an error, as the CLI treats it as bad usage.
func (c *Checker) Run(args []string) (*Result, error) {
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	c.elfs = map[string]bool{}
	c.cache = map[string]*elfInfo{}
	res := &Result{}
	for _, arg := range args {
		if err := c.checkArg(arg, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (c *Checker) checkArg(arg string, res *Result) error {
	st, err := os.Stat(arg)
	if err != nil {
		if pid, perr := strconv.Atoi(arg); perr == nil && pid > 0 {
			return c.checkPID(pid, res)
		}
		return fmt.Errorf("check %s: %w", arg, err)
	}
	if st.IsDir() {
		return c.walk(arg, res)
	}
	if kind := classify(arg); kind != "" {
		return c.checkText(kind, arg, res)
	}
	if looksLikeCollector(arg) {
		// Named on the command line under any name (my-config.yaml): what
		// it holds says what it is; walks still go by name only.
		return c.checkText(kindCollector, arg, res)
	}
	info, err := c.elf(arg)
	if errors.Is(err, ErrNotELF) {
		return fmt.Errorf("check %s: not an ELF file, build file, collector config (a YAML file with receivers and service) or *.bpf.c", arg)
	}
	if err != nil {
		return err
	}
	res.Targets = append(res.Targets, arg)
	res.Findings = append(res.Findings, elfFindings(info, arg, arg, true)...)
	return nil
}

func (c *Checker) elf(path string) (*elfInfo, error) {
	if info, ok := c.cache[path]; ok {
		return info, nil
	}
	info, err := analyzeELFFile(path, elfOptions{DebugRoot: c.DebugRoot})
	if err != nil {
		return nil, err
	}
	c.cache[path] = info
	return info, nil
}

// skipDir leaves out version control, dependencies (vendored code, npm's
// and Python's installed packages) and test fixtures (which hold
// deliberately bad examples) when walking a tree.
func skipDir(path, root, name string) bool {
	if path == root {
		return false
	}
	switch name {
	case "testdata", "vendor", "node_modules", "third_party", ".git", "site-packages", "dist-packages":
		return true
	}
	return strings.HasPrefix(name, ".") && name != ".cargo"
}

// walk checks every build file, collector config and eBPF source under
// root. Binaries found while walking are not checked: a tree holds
// committed BPF objects and fixtures that are not profiling targets.
func (c *Checker) walk(root string, res *Result) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walk %s: %w", p, err)
		}
		if d.IsDir() {
			if skipDir(p, root, d.Name()) {
				return filepath.SkipDir
			}
			if p != root && c.excluded(p) {
				res.Excluded = append(res.Excluded, p)
				return filepath.SkipDir
			}
			return nil
		}
		kind := classify(p)
		if kind == "" || !d.Type().IsRegular() {
			return nil
		}
		if c.excluded(p) {
			res.Excluded = append(res.Excluded, p)
			return nil
		}
		if err := c.checkText(kind, p, res); err != nil {
			// One unreadable file should not hide the rest of the tree.
			c.Log.Warn("skip file", "path", p, "err", err)
		}
		return nil
	})
}

func (c *Checker) checkText(kind fileKind, path string, res *Result) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	var fs []Finding
	switch kind {
	case kindCollector:
		fs, err = checkCollector(path, data)
		if err != nil {
			return err
		}
	case kindBPF:
		fs = c.bpf.checkBPFSource(path, string(data))
	default:
		fs = checkBuildFile(kind, path, string(data))
	}
	res.Targets = append(res.Targets, path)
	res.Findings = append(res.Findings, fs...)
	return nil
}

// checkPID checks a running process: its runtime flags, whether it
// publishes trace context, and every executable file it maps. A file
// mapped by several checked processes is reported once.
func (c *Checker) checkPID(pid int, res *Result) error {
	p, err := readProc(c.ProcRoot, pid)
	if err != nil {
		return err
	}
	target := fmt.Sprintf("pid %d (%s)", pid, p.comm)
	res.Targets = append(res.Targets, target)
	res.Findings = append(res.Findings, runtimeFindings(p, target)...)
	publishes := p.otelCtx
	root := filepath.Join(c.ProcRoot, strconv.Itoa(pid), "root")
	for _, f := range p.files {
		if strings.HasSuffix(f, " (deleted)") {
			res.Findings = append(res.Findings, newFinding("mapping-unreadable", target, f, 0, "the file was deleted after it was mapped"))
			continue
		}
		info, err := c.elf(filepath.Join(root, f))
		if err != nil {
			res.Findings = append(res.Findings, newFinding("mapping-unreadable", target, f, 0, "%v", err))
			continue
		}
		if info.publishesContext() {
			publishes = true
		}
		if c.elfs[f] {
			continue
		}
		c.elfs[f] = true
		if c.excluded(f) {
			res.Excluded = append(res.Excluded, f)
			continue
		}
		res.Targets = append(res.Targets, f)
		res.Findings = append(res.Findings, elfFindings(info, f, f, false)...)
	}
	if !publishes {
		res.Findings = append(res.Findings, newFinding("no-trace-context", target, p.exe, 0,
			"no mapped file exports otel_thread_ctx_v1, "+tracectx.ElasticContextSymbol+" or spanprof_set_trace_context, the executable does not use %s, and there is no OTEL_CTX mapping", SDKModule))
	}
	return nil
}

// looksLikeCollector reports whether a .yaml/.yml file is a collector
// configuration (top-level receivers and service) or a Kubernetes
// ConfigMap holding one, whatever its name.
func looksLikeCollector(path string) bool {
	lower := strings.ToLower(path)
	if !strings.HasSuffix(lower, ".yaml") && !strings.HasSuffix(lower, ".yml") {
		return false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	top := map[string]bool{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, _, ok := strings.Cut(line, ":"); ok && k != "" && !strings.ContainsAny(k[:1], " \t#-") {
			top[strings.TrimSpace(k)] = true
		}
	}
	return top["receivers"] && top["service"] || top["kind"] && strings.Contains(string(data), "receivers:")
}
