package check

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
)

var (
	dockerFromRE  = regexp.MustCompile(`^\s*(?i:FROM)\s+(?:--\S+\s+)*(\S+)(?:\s+(?i:AS)\s+(\S+))?`)
	dockerCmdRE   = regexp.MustCompile(`^\s*(?i:CMD|ENTRYPOINT)\s+(.*)$`)
	dockerArgRefs = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)
	pythonTagRE   = regexp.MustCompile(`^(\d+)(?:\.(\d+))?`)
)

// dockerStage is one FROM … section of a Dockerfile.
type dockerStage struct {
	line  int
	image string // as written, ARGs substituted
	// python is set when the stage runs a CPython 3.12 or later image,
	// directly or through the stages it is built FROM.
	python bool
	// perf: PYTHONPERFSUPPORT=1 in the stage's environment (its own ENV
	// or a parent stage's), or -X perf in its CMD/ENTRYPOINT.
	perf bool
}

// dockerPythonFindings warns when the image a Dockerfile builds (its last
// stage) runs CPython 3.12 or later, which has the perf trampoline, with
// neither PYTHONPERFSUPPORT=1 nor `-X perf`: its Python functions would
// be invisible in native stacks, as python-no-perf says of a process.
func dockerPythonFindings(target string, lines []srcLine) []Finding {
	args := map[string]string{}
	stages := map[string]*dockerStage{}
	var last *dockerStage
	for _, l := range lines {
		if m := dockerFromRE.FindStringSubmatch(l.text); m != nil {
			image := substituteArgs(m[1], args)
			st := &dockerStage{line: l.n, image: image}
			if parent, ok := stages[strings.ToLower(image)]; ok {
				st.image, st.python, st.perf = parent.image, parent.python, parent.perf
			} else {
				st.python = isModernPythonImage(image)
			}
			if m[2] != "" {
				stages[strings.ToLower(m[2])] = st
			}
			last = st
			continue
		}
		if last == nil {
			// ARGs before the first FROM parameterise the FROM lines.
			if m := dockerAssignRE.FindStringSubmatch(l.text); m != nil && strings.EqualFold(strings.Fields(l.text)[0], "ARG") {
				for _, p := range dockerPairRE.FindAllStringSubmatch(m[1], -1) {
					args[p[1]] = strings.Trim(p[2], `"'`)
				}
			}
			continue
		}
		if m := dockerAssignRE.FindStringSubmatch(l.text); m != nil && strings.EqualFold(strings.Fields(l.text)[0], "ENV") {
			for _, p := range dockerPairRE.FindAllStringSubmatch(m[1], -1) {
				if p[1] == "PYTHONPERFSUPPORT" {
					val := p[2]
					if val == "" {
						val = p[3]
					}
					last.perf = strings.TrimSpace(strings.Trim(val, `"'`)) == "1"
				}
			}
		}
		if m := dockerCmdRE.FindStringSubmatch(l.text); m != nil && commandHasPerf(m[1]) {
			last.perf = true
		}
	}
	if last == nil || !last.python || last.perf {
		return nil
	}
	return []Finding{newFinding("dockerfile-python-no-perf", target, target, last.line,
		"the image runs %s (Python 3.12 or later) with neither PYTHONPERFSUPPORT=1 nor python -X perf: its Python functions are invisible in native stacks", last.image)}
}

// substituteArgs replaces ${NAME}, ${NAME:-default} and $NAME by the
// values of the ARGs before the first FROM.
func substituteArgs(s string, args map[string]string) string {
	return dockerArgRefs.ReplaceAllStringFunc(s, func(ref string) string {
		m := dockerArgRefs.FindStringSubmatch(ref)
		name := m[1] + m[3]
		if v, ok := args[name]; ok && v != "" {
			return v
		}
		return m[2]
	})
}

// isModernPythonImage recognises the official CPython images whose tag
// says 3.12 or later, or says no minor version at all (python,
// python:3, python:slim), which names the current release, 3.12 or later
// since October 2023.
func isModernPythonImage(image string) bool {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	name, tag := image, ""
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		name, tag = image[:i], image[i+1:]
	}
	switch strings.ToLower(name) {
	case "python", "library/python", "docker.io/library/python", "docker.io/python":
	default:
		return false
	}
	m := pythonTagRE.FindStringSubmatch(tag)
	if m == nil {
		return true // latest, slim, bookworm, alpine: the current release
	}
	major, _ := strconv.Atoi(m[1])
	if m[2] == "" {
		return major >= 3
	}
	minor, _ := strconv.Atoi(m[2])
	return major > 3 || major == 3 && minor >= 12
}

// commandHasPerf reports whether a CMD or ENTRYPOINT (exec or shell
// form) turns the perf trampoline on: -X perf, -Xperf, -X perf_jit, or
// PYTHONPERFSUPPORT=1 in front of the command.
func commandHasPerf(cmd string) bool {
	var words []string
	if strings.HasPrefix(strings.TrimSpace(cmd), "[") && json.Unmarshal([]byte(cmd), &words) == nil {
		// Exec form; a shell inside it ("sh", "-c", "…") is split below.
		var split []string
		for _, w := range words {
			split = append(split, strings.Fields(w)...)
		}
		words = split
	} else {
		words = strings.Fields(cmd)
	}
	for i, w := range words {
		w = strings.Trim(w, `"'`)
		switch {
		case w == "-Xperf" || w == "-Xperf_jit" || w == "PYTHONPERFSUPPORT=1":
			return true
		case w == "-X" && i+1 < len(words):
			if n := strings.Trim(words[i+1], `"'`); n == "perf" || n == "perf_jit" {
				return true
			}
		}
	}
	return false
}
