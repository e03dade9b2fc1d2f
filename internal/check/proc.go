package check

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spanprof/spanprof/internal/proc"
)

// procInfo is what /proc tells about one process.
type procInfo struct {
	pid  int
	comm string
	exe  string
	argv []string
	env  map[string]string
	// files are the executable file mappings, in maps order.
	files   []string
	otelCtx bool
}

// readProc reads /proc/PID (under procRoot, which tests replace).
func readProc(procRoot string, pid int) (*procInfo, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("pid %d: no such process", pid)
	}
	if err != nil {
		return nil, fmt.Errorf("read pid %d: %w", pid, err)
	}
	// Right after an exec the kernel has switched the executable but not
	// yet set the new argument area: cmdline reads empty for a moment (11
	// of 40 reads of a node just started, as soon as exe named node). A
	// process's flags are judged from its command line, so wait for it.
	for i := 0; len(cmdline) == 0 && i < 20; i++ {
		time.Sleep(5 * time.Millisecond)
		if cmdline, err = os.ReadFile(filepath.Join(dir, "cmdline")); err != nil {
			return nil, fmt.Errorf("read pid %d: %w", pid, err)
		}
	}
	p := &procInfo{pid: pid, env: map[string]string{}}
	for _, a := range bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0}) {
		p.argv = append(p.argv, string(a))
	}
	if c, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		p.comm = strings.TrimSpace(string(c))
	}
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		p.exe = exe
	}
	if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
		for _, kv := range bytes.Split(env, []byte{0}) {
			if k, v, ok := strings.Cut(string(kv), "="); ok {
				p.env[k] = v
			}
		}
	}
	maps, err := os.Open(filepath.Join(dir, "maps"))
	if errors.Is(err, fs.ErrPermission) {
		// Root too can be refused; say why rather than "needs root".
		if why := proc.CheckReadable(procRoot, pid); why != nil {
			return nil, why
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read pid %d maps: %w", pid, err)
	}
	defer maps.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "OTEL_CTX") {
			p.otelCtx = true
		}
		fields := strings.Fields(line)
		if len(fields) < 6 || !strings.Contains(fields[1], "x") {
			continue
		}
		path := strings.Join(fields[5:], " ")
		if strings.HasPrefix(path, "/") && !seen[path] && !strings.HasPrefix(path, "/memfd:") {
			seen[path] = true
			p.files = append(p.files, path)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read pid %d maps: %w", pid, err)
	}
	if len(p.files) == 0 && p.exe == "" {
		return nil, fmt.Errorf("pid %d is a kernel thread or has exited: nothing to check", pid)
	}
	return p, nil
}

// exeName is the base name of the executable, from /proc/PID/exe or argv[0].
func (p *procInfo) exeName() string {
	if p.exe != "" {
		return filepath.Base(strings.TrimSuffix(p.exe, " (deleted)"))
	}
	if len(p.argv) > 0 {
		return filepath.Base(p.argv[0])
	}
	return p.comm
}

// opts gathers flags from argv and from the environment variables the
// runtime reads its options from.
func (p *procInfo) opts(envVars ...string) []string {
	out := append([]string(nil), p.argv...)
	for _, v := range envVars {
		out = append(out, strings.Fields(p.env[v])...)
	}
	return out
}

func (p *procInfo) mapsFile(re *regexp.Regexp) string {
	for _, f := range p.files {
		if re.MatchString(filepath.Base(f)) {
			return f
		}
	}
	return ""
}

var (
	pythonExeRE = regexp.MustCompile(`^python(\d+)\.(\d+)`)
	libpythonRE = regexp.MustCompile(`^libpython(\d+)\.(\d+)`)
	libjvmRE    = regexp.MustCompile(`^libjvm\.so`)
	nodeExeRE   = regexp.MustCompile(`^(node|nodejs)$`)
)

// runtimeFindings checks the JIT and interpreter runtimes whose frames the
// kernel unwinder only sees with the right start-up flags.
func runtimeFindings(p *procInfo, target string) []Finding {
	name := p.exeName()
	var out []Finding
	if name == "java" || p.mapsFile(libjvmRE) != "" {
		on := false
		for _, o := range p.opts("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS") {
			switch o {
			case "-XX:+PreserveFramePointer":
				on = true
			case "-XX:-PreserveFramePointer":
				on = false
			}
		}
		if !on {
			out = append(out, newFinding("jvm-no-preserve-frame-pointer", target, p.exe, 0,
				"JIT-compiled Java frames have no frame pointer, so stacks stop at the first Java frame"))
		}
	}
	if nodeExeRE.MatchString(name) {
		var perf, interp bool
		for _, o := range p.opts("NODE_OPTIONS") {
			switch {
			case o == "--perf-basic-prof" || o == "--perf-basic-prof-only-functions" || o == "--perf-prof":
				perf = true
			case o == "--interpreted-frames-native-stack":
				interp = true
			}
		}
		var miss []string
		if !perf {
			miss = append(miss, "--perf-basic-prof (JIT symbols in /tmp/perf-PID.map)")
		}
		if !interp {
			miss = append(miss, "--interpreted-frames-native-stack (interpreted frames on the native stack)")
		}
		if len(miss) > 0 {
			out = append(out, newFinding("node-no-perf-flags", target, p.exe, 0, "node runs without %s", strings.Join(miss, " and ")))
		}
	}
	major, minor, isPython := pythonVersion(p)
	if isPython && major == 3 && minor < 12 {
		out = append(out, newFinding("python-no-perf-support", target, p.exe, 0,
			"python %d.%d has no -X perf (it came in 3.12), so Python functions are invisible in native stacks", major, minor))
	}
	if isPython && (major > 3 || major == 3 && minor >= 12) {
		on := p.env["PYTHONPERFSUPPORT"] == "1"
		args := p.argv
		for i, a := range args {
			if a == "-Xperf" || a == "-Xperf_jit" || a == "-X" && i+1 < len(args) && (args[i+1] == "perf" || args[i+1] == "perf_jit") {
				on = true
			}
		}
		if !on {
			out = append(out, newFinding("python-no-perf", target, p.exe, 0,
				"python %d.%d runs without -X perf, so Python functions are invisible in native stacks", major, minor))
		}
	}
	return out
}

func pythonVersion(p *procInfo) (major, minor int, ok bool) {
	m := pythonExeRE.FindStringSubmatch(p.exeName())
	if m == nil {
		if lib := p.mapsFile(libpythonRE); lib != "" {
			m = libpythonRE.FindStringSubmatch(filepath.Base(lib))
		}
	}
	if m == nil {
		return 0, 0, false
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor, true
}
