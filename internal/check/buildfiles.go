package check

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// fileKind says which reader handles a text file; the zero value means
// the checker does not read the file.
type fileKind string

const (
	kindMake      fileKind = "make"
	kindDocker    fileKind = "docker"
	kindCMake     fileKind = "cmake"
	kindMeson     fileKind = "meson"
	kindCargo     fileKind = "cargo"
	kindBazel     fileKind = "bazel"
	kindCollector fileKind = "collector"
	kindBPF       fileKind = "bpf"
)

// classify picks a reader from the file name alone.
func classify(path string) fileKind {
	base := filepath.Base(path)
	lower := strings.ToLower(base)
	switch {
	case base == "Makefile" || base == "makefile" || base == "GNUmakefile" || strings.HasSuffix(base, ".mk"):
		return kindMake
	case strings.HasPrefix(base, "Dockerfile") || strings.HasSuffix(base, ".Dockerfile") ||
		strings.HasSuffix(base, ".dockerfile") || base == "Containerfile":
		return kindDocker
	case base == "CMakeLists.txt":
		return kindCMake
	case base == "meson.build":
		return kindMeson
	case filepath.Base(filepath.Dir(path)) == ".cargo" && (base == "config.toml" || base == "config"):
		return kindCargo
	case base == ".bazelrc" || strings.HasSuffix(base, ".bazelrc"):
		return kindBazel
	case (strings.HasPrefix(lower, "collector") || strings.HasPrefix(lower, "otel")) &&
		(strings.HasSuffix(lower, ".yaml") || strings.HasSuffix(lower, ".yml")):
		return kindCollector
	case strings.HasSuffix(base, ".bpf.c") || strings.HasSuffix(base, ".bpf.h"):
		return kindBPF
	}
	return ""
}

// srcLine is one logical line: continuation lines joined, comment removed,
// numbered by its first physical line.
type srcLine struct {
	n    int
	text string
}

// logicalLines joins backslash continuations and drops '#' comments (all
// the build languages read here use '#'). A '#' inside quotes is kept.
func logicalLines(data string) []srcLine {
	var out []srcLine
	var cur strings.Builder
	start := 0
	for i, raw := range strings.Split(data, "\n") {
		raw = strings.TrimRight(raw, "\r")
		if cur.Len() == 0 {
			start = i + 1
		}
		line := stripComment(raw)
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\"))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(line)
		out = append(out, srcLine{start, cur.String()})
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, srcLine{start, cur.String()})
	}
	return out
}

func stripComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || s[i-1] != '$' && s[i-1] != '\\'):
			return s[:i]
		}
	}
	return s
}

// hasFlag matches a flag as a whole token inside shell, make, CMake,
// meson or TOML text.
func hasFlag(text, flag string) bool {
	re := flagRE(flag)
	return re.MatchString(text)
}

// flagREs holds the token patterns of the flags the rules look for,
// compiled once; the map is read-only after init, so checks may run
// concurrently.
var flagREs = func() map[string]*regexp.Regexp {
	m := map[string]*regexp.Regexp{}
	for _, f := range []string{flagFP, flagLeafFP, "-s", "-Wl,-s", "-Wl,--strip-all"} {
		m[f] = compileFlag(f)
	}
	return m
}()

func compileFlag(flag string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[\s"'=,(\[{])` + regexp.QuoteMeta(flag) + `($|[\s"',)\]}])`)
}

func flagRE(flag string) *regexp.Regexp {
	if re, ok := flagREs[flag]; ok {
		return re
	}
	return compileFlag(flag)
}

const (
	flagFP     = "-fno-omit-frame-pointer"
	flagLeafFP = "-mno-omit-leaf-frame-pointer"
)

var (
	omitFPRE    = regexp.MustCompile(`(^|[\s"'=,(\[])(-fomit-frame-pointer|-momit-leaf-frame-pointer)\b`)
	buildIDRE   = regexp.MustCompile(`--build-id(=([a-z0-9x]+))?`)
	removeIDRE  = regexp.MustCompile(`(-R|--remove-section)[= ]\s*['"]?\.note(\.gnu\.build-id|\*)`)
	stripCmdRE  = regexp.MustCompile(`(^|[\s;&|(])(\S*-)?strip(\s|$)|\$[({]STRIP[)}]`)
	keepDebugRE = regexp.MustCompile(`--only-keep-debug|--add-gnu-debuglink|debuginfod|\.build-id/`)
	goBuildRE   = regexp.MustCompile(`\bgo\s+(build|install)\b`)
	goLdflagsRE = regexp.MustCompile(`-ldflags[= ]\s*("[^"]*"|'[^']*'|\S+)`)
	bpfTargetRE = regexp.MustCompile(`-target\s+bpf|--target=bpf|\bbpf2go\b`)
	compilerRE  = regexp.MustCompile(`(^|[\s;&|(@])(\S*-)?(gcc|g\+\+|cc|c\+\+|clang|clang\+\+|clang-\d+|clang\+\+-\d+)(\s|$)|\$[({](CC|CXX)[)}]`)
	cSourceRE   = regexp.MustCompile(`\.(c|cc|cpp|cxx|C)(\s|$|["'])|\s-c(\s|$)|\$<`)
)

// buildFindings applies the build-file rules that hold in every build
// language: flags that must not appear, build-ID removal, stripping and
// Go link flags. The caller adds the language's own checks for flags
// that must appear.
func commonBuildFindings(target string, lines []srcLine) []Finding {
	var out []Finding
	keepsDebug := false
	for _, l := range lines {
		if keepDebugRE.MatchString(l.text) {
			keepsDebug = true
		}
	}
	for _, l := range lines {
		t := l.text
		if m := omitFPRE.FindStringSubmatch(t); m != nil {
			out = append(out, newFinding("cflags-omit-frame-pointer", target, target, l.n, "%s removes the frame pointer", m[2]))
		}
		for _, m := range buildIDRE.FindAllStringSubmatch(t, -1) {
			switch m[2] {
			case "", "sha1", "tree":
			case "none":
				out = append(out, newFinding("ldflags-no-build-id", target, target, l.n, "--build-id=none removes the GNU build ID"))
			default:
				out = append(out, newFinding("build-id-not-sha1", target, target, l.n, "--build-id=%s gives a build ID that is not a 20-byte sha1", m[2]))
			}
		}
		isGo := goBuildRE.MatchString(t)
		if removeIDRE.MatchString(t) {
			out = append(out, newFinding("strip-removes-build-id", target, target, l.n,
				"this command removes .note.gnu.build-id (plain strip --strip-all and ld -s keep it)"))
		} else if !isGo && !keepsDebug && strips(t) {
			out = append(out, newFinding("strip-no-debug-file", target, target, l.n,
				"symbols are stripped here and the file keeps no debug file (no --only-keep-debug, --add-gnu-debuglink or debuginfod); strip keeps the build ID, but the symbols are gone"))
		}
		if isGo {
			if m := goLdflagsRE.FindStringSubmatch(t); m != nil {
				fl := strings.Trim(m[1], `"'`)
				var which []string
				for _, tok := range strings.Fields(strings.ReplaceAll(fl, "=", " ")) {
					if tok == "-s" || tok == "-w" {
						which = append(which, tok)
					}
				}
				if len(which) > 0 {
					out = append(out, newFinding("go-ldflags-strip", target, target, l.n,
						"go build -ldflags %s: Go still keeps frame pointers and function names (.gopclntab)", strings.Join(which, " ")))
				}
			}
		}
	}
	return out
}

// strips reports whether a line runs strip, or links with -s.
func strips(t string) bool {
	if stripCmdRE.MatchString(t) && !strings.Contains(t, "--strip-debug") && !strings.Contains(t, "--only-keep-debug") {
		return true
	}
	return hasFlag(t, "-s") && (compilerRE.MatchString(t) || strings.Contains(t, "LDFLAGS")) ||
		hasFlag(t, "-Wl,-s") || hasFlag(t, "-Wl,--strip-all") || strings.Contains(t, "--strip=always")
}

// missingFP names the frame-pointer flags text lacks.
func missingFP(text string) []string {
	var miss []string
	for _, f := range []string{flagFP, flagLeafFP} {
		if !hasFlag(text, f) {
			miss = append(miss, f)
		}
	}
	return miss
}

// noUnwindRE finds flags that drop the unwind tables the unwinder
// recovers a leaf function's caller from.
var noUnwindRE = regexp.MustCompile(`(^|[\s"'=,(\[])-fno-(asynchronous-)?unwind-tables\b`)

// fpFindings judges the frame-pointer flags of one compile site by the
// model binaries are judged by: without -fno-omit-frame-pointer callers
// are lost (error); without only -mno-omit-leaf-frame-pointer leaf
// functions lack a frame, which the unwinder recovers from the unwind
// tables (a note), unless the flags drop those tables (a warning). what
// ends with the verb ("CFLAGS lacks").
func fpFindings(target string, line int, what, flags string) []Finding {
	miss := missingFP(flags)
	switch {
	case len(miss) == 0:
		return nil
	case slices.Contains(miss, flagFP):
		return []Finding{newFinding("cflags-no-frame-pointer", target, target, line, "%s %s", what, strings.Join(miss, " "))}
	case noUnwindRE.MatchString(flags):
		f := newFinding("leaf-frame-pointer", target, target, line,
			"%s %s and the unwind tables are off (-fno-asynchronous-unwind-tables): a sample in a leaf function loses its caller", what, flagLeafFP)
		f.Fix = "add " + flagLeafFP + " (clang keeps leaf frames with it; GCC 12 does not) and keep the unwind tables"
		return []Finding{f}
	}
	f := newFinding("leaf-frame-pointer", target, target, line,
		"%s %s: leaf functions may keep no frame pointer; the unwinder recovers their caller from the unwind tables (.eh_frame, on by default)", what, flagLeafFP)
	f.Severity, f.Fix = SevNote, "add "+flagLeafFP+" so clang keeps leaf frames too"
	return []Finding{f}
}

// linkHasBuildID reports whether any line mentions a linker build ID. A
// --build-id=none counts too: it is reported on its own line, once.
func linkHasBuildID(lines []srcLine) bool {
	for _, l := range lines {
		if buildIDRE.MatchString(l.text) {
			return true
		}
	}
	return false
}
