package check

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The eBPF lint is a set of plain-text heuristics, not a C parser; they
// are documented in docs/check.md so nobody mistakes them for proofs.

var (
	structRE    = regexp.MustCompile(`\bstruct\s+(\w+)\s*\{`)
	stackField  = regexp.MustCompile(`\b\w*stack\w*\s*(\[[^\]]*\])?\s*;`)
	memberRE    = regexp.MustCompile(`\bstruct\s+(\w+)\s+\w+\s*(\[[^\]]*\])?\s*;`)
	secRE       = regexp.MustCompile(`\bSEC\(\s*"([^"]+)"\s*\)`)
	printkRE    = regexp.MustCompile(`\bbpf_(trace_)?printk\s*\(`)
	ktimeRE     = regexp.MustCompile(`\bbpf_ktime_get_ns\s*\(`)
	includeRE   = regexp.MustCompile(`(?m)^\s*#\s*include\s+"([^"]+)"`)
	realtimeRE  = regexp.MustCompile(`CLOCK_REALTIME|(?i:boot_?(time)?_?offset)|BootTime`)
	traceFields = []*regexp.Regexp{regexp.MustCompile(`\btrace_id\b`), regexp.MustCompile(`\bspan_id\b`)}
)

// stripCComments blanks comments but keeps newlines, so offsets still map
// to the right line.
func stripCComments(src string) string {
	b := []byte(src)
	for i := 0; i+1 < len(b); i++ {
		switch {
		case b[i] == '"':
			for i++; i < len(b) && b[i] != '"' && b[i] != '\n'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case b[i] == '/' && b[i+1] == '/':
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		case b[i] == '/' && b[i+1] == '*':
			j := i
			for ; j < len(b) && !(j > i+1 && b[j-1] == '*' && b[j] == '/'); j++ {
				if b[j] != '\n' {
					b[j] = ' '
				}
			}
			if j < len(b) {
				b[j] = ' '
			}
			i = j
		}
	}
	return string(b)
}

// block returns the text between the brace at or after start and its
// match, and the offset of the opening brace; -1 when unbalanced.
func block(src string, start int) (string, int) {
	open := strings.IndexByte(src[start:], '{')
	if open < 0 {
		return "", -1
	}
	open += start
	depth := 0
	for i := open; i < len(src); i++ {
		switch src[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return src[open+1 : i], open
			}
		}
	}
	return "", -1
}

func lineAt(src string, off int) int { return strings.Count(src[:off], "\n") + 1 }

// cStruct is one struct definition found in a source or header.
type cStruct struct {
	name, body, file string
	line             int
}

func structsIn(file, src string) []cStruct {
	var out []cStruct
	for _, m := range structRE.FindAllStringSubmatchIndex(src, -1) {
		body, open := block(src, m[0])
		if open < 0 {
			continue
		}
		out = append(out, cStruct{src[m[2]:m[3]], body, file, lineAt(src, m[0])})
	}
	return out
}

// hasTraceFields looks for trace_id and span_id in the struct or, one or
// two levels down, in the structs it embeds.
func hasTraceFields(s cStruct, all map[string]cStruct, depth int) bool {
	ok := true
	for _, re := range traceFields {
		if !re.MatchString(s.body) {
			ok = false
		}
	}
	if ok || depth > 2 {
		return ok
	}
	for _, m := range memberRE.FindAllStringSubmatch(s.body, -1) {
		if inner, found := all[m[1]]; found && inner.name != s.name && hasTraceFields(inner, all, depth+1) {
			return true
		}
	}
	return false
}

// bpfLinter remembers, per tree, whether Go code converts to wall-clock
// time, so a directory walk greps the Go files once.
type bpfLinter struct {
	realtime map[string]bool
}

// checkBPFSource lints one *.bpf.c (or *.bpf.h) file. Quoted includes are
// read too, because record structs usually live in a shared header.
func (l *bpfLinter) checkBPFSource(path, src string) []Finding {
	src = stripCComments(src)
	var out []Finding
	all := map[string]cStruct{}
	var own []cStruct
	for _, s := range structsIn(path, src) {
		all[s.name] = s
		own = append(own, s)
	}
	for _, m := range includeRE.FindAllStringSubmatch(src, -1) {
		inc := filepath.Join(filepath.Dir(path), m[1])
		data, err := os.ReadFile(inc)
		if err != nil {
			continue
		}
		for _, s := range structsIn(inc, stripCComments(string(data))) {
			all[s.name] = s
			own = append(own, s)
		}
	}
	seen := map[string]bool{}
	for _, s := range own {
		if seen[s.name] || !stackField.MatchString(s.body) || hasTraceFields(s, all, 0) {
			continue
		}
		seen[s.name] = true
		out = append(out, newFinding("bpf-record-no-trace-context", path, s.file, s.line,
			"struct %s carries stacks but no trace_id/span_id, so samples lose their span", s.name))
	}

	for _, m := range secRE.FindAllStringSubmatchIndex(src, -1) {
		sec := src[m[2]:m[3]]
		if !strings.HasPrefix(sec, "perf_event") && !strings.Contains(sec, "sched_switch") {
			continue
		}
		body, open := block(src, m[1])
		if open < 0 {
			continue
		}
		if p := printkRE.FindStringIndex(body); p != nil {
			out = append(out, newFinding("bpf-printk-hot-path", path, path, lineAt(src, open+1+p[0]),
				"bpf_printk in SEC(%q) runs on every sample and writes to the shared trace pipe", sec))
		}
	}

	if k := ktimeRE.FindStringIndex(src); k != nil {
		root := treeRoot(path)
		if !l.convertsRealtime(root) {
			out = append(out, newFinding("bpf-ktime-no-realtime", path, path, lineAt(src, k[0]),
				"bpf_ktime_get_ns is CLOCK_MONOTONIC, and no Go file under %s mentions CLOCK_REALTIME or a boot-time offset", root))
		}
	}
	return out
}

// treeRoot is the nearest directory above path holding go.mod, else the
// file's own directory: the tree whose Go code would convert timestamps.
func treeRoot(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Dir(path)
	}
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if dir == filepath.Dir(dir) {
			return filepath.Dir(abs)
		}
	}
}

func (l *bpfLinter) convertsRealtime(root string) bool {
	if v, ok := l.realtime[root]; ok {
		return v
	}
	found := false
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipDir
		}
		if d.IsDir() {
			if skipDir(p, root, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			if data, err := os.ReadFile(p); err == nil && realtimeRE.Match(data) {
				found = true
				return filepath.SkipAll
			}
		}
		return nil
	})
	if l.realtime == nil {
		l.realtime = map[string]bool{}
	}
	l.realtime[root] = found
	return found
}
