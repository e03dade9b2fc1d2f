package check

import (
	"fmt"
	"regexp"
	"strings"
)

// checkBuildFile runs the rules for one build file of a known kind.
func checkBuildFile(kind fileKind, target, data string) []Finding {
	lines := logicalLines(data)
	out := commonBuildFindings(target, lines)
	switch kind {
	case kindMake:
		out = append(out, checkVarFlags(kind, target, lines)...)
	case kindDocker:
		out = append(out, checkVarFlags(kind, target, lines)...)
		out = append(out, dockerPythonFindings(target, lines)...)
	case kindCMake:
		out = append(out, checkUnionFlags(target, lines, cmakeRules)...)
	case kindMeson:
		out = append(out, checkUnionFlags(target, lines, mesonRules)...)
	case kindBazel:
		out = append(out, checkUnionFlags(target, lines, bazelRules)...)
	case kindCargo:
		out = append(out, checkCargo(target, lines)...)
	}
	return out
}

var (
	makeAssignRE   = regexp.MustCompile(`^\s*(?:export\s+|override\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*(\?=|::=|:=|\+=|!=|=)\s*(.*)$`)
	dockerAssignRE = regexp.MustCompile(`^\s*(?i:ENV|ARG)\s+(.*)$`)
	dockerPairRE   = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)(?:=("[^"]*"|'[^']*'|\S*)|\s+(.*))`)
	inlineFlagsRE  = regexp.MustCompile(`(?:^|[\s;&|(])(?:export\s+)?(CFLAGS|CXXFLAGS|LDFLAGS)\s*\+?=\s*("[^"]*"|'[^']*'|\S*)`)
	varRefRE       = regexp.MustCompile(`\$[({]([A-Za-z_][A-Za-z0-9_.]*)[)}]`)
)

type varDef struct {
	value string
	line  int
}

// expand substitutes $(VAR) and ${VAR} from vars, a few levels deep, so
// CFLAGS = $(COMMON) -g is judged by what COMMON holds.
func expand(s string, vars map[string]*varDef) string {
	for depth := 0; depth < 8 && varRefRE.MatchString(s); depth++ {
		s = varRefRE.ReplaceAllStringFunc(s, func(ref string) string {
			name := varRefRE.FindStringSubmatch(ref)[1]
			if v, ok := vars[name]; ok {
				return v.value
			}
			return ""
		})
	}
	return s
}

// checkVarFlags handles Makefiles and Dockerfiles, where flags live in
// variables (make assignments, ENV/ARG, inline VAR=... before a command)
// or on compiler command lines.
func checkVarFlags(kind fileKind, target string, lines []srcLine) []Finding {
	vars := map[string]*varDef{}
	assignLine := map[int]bool{}
	for _, l := range lines {
		if kind == kindMake {
			if m := makeAssignRE.FindStringSubmatch(l.text); m != nil && !strings.HasPrefix(l.text, "\t") {
				setVar(vars, m[1], m[2], strings.TrimSpace(m[3]), l.n)
				assignLine[l.n] = true
			}
			continue
		}
		if m := dockerAssignRE.FindStringSubmatch(l.text); m != nil {
			for _, p := range dockerPairRE.FindAllStringSubmatch(m[1], -1) {
				val := p[2]
				if val == "" {
					val = p[3]
				}
				setVar(vars, p[1], "=", strings.Trim(val, `"'`), l.n)
			}
			assignLine[l.n] = true
		}
	}

	var out []Finding
	builds := false
	report := func(line int, what, flags string) {
		out = append(out, fpFindings(target, line, what+" lacks", flags)...)
	}
	for _, name := range []string{"CFLAGS", "CXXFLAGS"} {
		if v, ok := vars[name]; ok {
			builds = true
			report(v.line, name, expand(v.value, vars))
		}
	}
	firstSite := 0
	for _, l := range lines {
		if assignLine[l.n] || bpfTargetRE.MatchString(l.text) {
			continue
		}
		for _, m := range inlineFlagsRE.FindAllStringSubmatch(l.text, -1) {
			if m[1] == "LDFLAGS" {
				continue
			}
			builds = true
			if firstSite == 0 {
				firstSite = l.n
			}
			report(l.n, m[1]+" here", expand(strings.Trim(m[2], `"'`), vars))
		}
		if !compilerRE.MatchString(l.text) || !cSourceRE.MatchString(l.text) || inlineFlagsRE.MatchString(l.text) {
			continue
		}
		builds = true
		if firstSite == 0 {
			firstSite = l.n
		}
		if refsDefinedFlags(l.text, vars) {
			continue // judged with the variable above
		}
		report(l.n, "this compiler command", expand(l.text, vars))
	}
	if builds && !linkHasBuildID(lines) {
		line := firstSite
		if v, ok := vars["LDFLAGS"]; ok {
			line = v.line
		} else if v, ok := vars["CFLAGS"]; ok && (line == 0 || v.line < line) {
			line = v.line
		}
		out = append(out, newFinding("ldflags-no-build-id", target, target, firstNonZero(line),
			"no --build-id in the link flags: Debian and Fedora compilers add one by default, others do not; ask for -Wl,--build-id=sha1"))
	}
	return out
}

func setVar(vars map[string]*varDef, name, op, val string, line int) {
	v, ok := vars[name]
	switch {
	case !ok:
		vars[name] = &varDef{val, line}
	case op == "+=":
		v.value += " " + val
	case op == "?=":
	default:
		v.value = val
	}
}

// refsDefinedFlags reports whether a command line takes its flags from a
// CFLAGS/CXXFLAGS variable the file defines.
func refsDefinedFlags(t string, vars map[string]*varDef) bool {
	for _, m := range varRefRE.FindAllStringSubmatch(t, -1) {
		if m[1] == "CFLAGS" || m[1] == "CXXFLAGS" {
			if _, ok := vars[m[1]]; ok {
				return true
			}
		}
	}
	return false
}

// unionRules describes a build language where compile options accumulate
// (CMake, meson, Bazel): the frame-pointer flags must appear somewhere in
// the option-setting lines, not in each one.
type unionRules struct {
	// builds matches a line that shows the file compiles C or C++.
	builds *regexp.Regexp
	// sites matches lines that set compile options.
	sites *regexp.Regexp
	// linkSites matches lines that set link options.
	linkSites *regexp.Regexp
	// noBuildIDWhy explains the toolchain's default when no build ID is
	// asked for.
	noBuildIDWhy string
}

var (
	cmakeRules = unionRules{
		builds:       regexp.MustCompile(`(?i)^\s*(project|add_executable|add_library)\s*\(`),
		sites:        regexp.MustCompile(`(?i)CMAKE_(C|CXX)_FLAGS|add_compile_options|target_compile_options|COMPILE_OPTIONS`),
		linkSites:    regexp.MustCompile(`(?i)LINKER_FLAGS|add_link_options|target_link_options|LINK_OPTIONS`),
		noBuildIDWhy: "no --build-id in the link options; add add_link_options(-Wl,--build-id=sha1)",
	}
	mesonRules = unionRules{
		builds:       regexp.MustCompile(`^\s*(project\s*\(.*'(c|cpp)'|executable\s*\(|(shared_|static_|both_)?library\s*\()`),
		sites:        regexp.MustCompile(`add_(project|global)_arguments|\b(c|cpp)_args\b`),
		linkSites:    regexp.MustCompile(`add_(project|global)_link_arguments|\blink_args\b`),
		noBuildIDWhy: "no --build-id in the link arguments; add add_project_link_arguments('-Wl,--build-id=sha1', language: ['c', 'cpp'])",
	}
	bazelRules = unionRules{
		builds:       regexp.MustCompile(`--(copt|conlyopt|cxxopt|linkopt|host_copt)\b`),
		sites:        regexp.MustCompile(`--(copt|conlyopt|cxxopt)\b`),
		linkSites:    regexp.MustCompile(`--linkopt\b`),
		noBuildIDWhy: "no --linkopt=-Wl,--build-id=sha1: Bazel's default Unix toolchain links with --build-id=md5",
	}
)

func checkUnionFlags(target string, lines []srcLine, r unionRules) []Finding {
	buildLine, siteLine, linkLine := 0, 0, 0
	var sites strings.Builder
	for _, l := range lines {
		if buildLine == 0 && r.builds.MatchString(l.text) {
			buildLine = l.n
		}
		if r.sites.MatchString(l.text) {
			if siteLine == 0 {
				siteLine = l.n
			}
			sites.WriteString(l.text + "\n")
		}
		if linkLine == 0 && r.linkSites.MatchString(l.text) {
			linkLine = l.n
		}
	}
	if buildLine == 0 {
		return nil
	}
	var out []Finding
	what := "the compile options lack"
	if siteLine == 0 {
		what = "the file sets no compile options, so it lacks"
	}
	out = append(out, fpFindings(target, firstNonZero(siteLine, buildLine), what, sites.String())...)
	if !linkHasBuildID(lines) {
		out = append(out, newFinding("ldflags-no-build-id", target, target, firstNonZero(linkLine, buildLine), "%s", r.noBuildIDWhy))
	}
	return out
}

func firstNonZero(v ...int) int {
	for _, x := range v {
		if x != 0 {
			return x
		}
	}
	return 1
}

var forceFPRE = regexp.MustCompile(`force-frame-pointers(?:=["']?([A-Za-z]+))?`)

// checkCargo wants -C force-frame-pointers=yes among the rustflags. The
// Rust standard library is prebuilt without frame pointers, which the
// message says so nobody expects more than the flag can give.
func checkCargo(target string, lines []srcLine) []Finding {
	flagLine := 0
	for _, l := range lines {
		if strings.Contains(l.text, "rustflags") && flagLine == 0 {
			flagLine = l.n
		}
		if m := forceFPRE.FindStringSubmatch(l.text); m != nil {
			switch strings.ToLower(m[1]) {
			case "", "yes", "y", "on", "true":
				return nil
			default:
				return []Finding{newFinding("rustflags-no-frame-pointer", target, target, l.n,
					"force-frame-pointers=%s turns frame pointers off", m[1])}
			}
		}
	}
	return []Finding{newFinding("rustflags-no-frame-pointer", target, target, firstNonZero(flagLine),
		"%s", fmt.Sprintf("rustflags lack -C force-frame-pointers=yes (std stays without frame pointers unless built with -Zbuild-std)"))}
}
