package check

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeProc writes a /proc/PID tree: argv, environment, exe link, maps
// naming the given files, and a root link to / so mapped paths resolve.
func fakeProc(t *testing.T, root string, pid int, exe string, argv, env, files []string, extraMaps string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var maps strings.Builder
	for i, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		maps.WriteString(strconv.Itoa(0x1000*(i+1)) + "-" + strconv.Itoa(0x1000*(i+2)) + " r-xp 00000000 08:01 1234 " + abs + "\n")
	}
	maps.WriteString(extraMaps)
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cmdline", strings.Join(argv, "\x00")+"\x00")
	write("environ", strings.Join(env, "\x00"))
	write("comm", filepath.Base(exe)+"\n")
	write("maps", maps.String())
	if err := os.Symlink(exe, filepath.Join(dir, "exe")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
		t.Fatal(err)
	}
}

func TestProcessRules(t *testing.T) {
	needFixtures(t)
	good, ctx := bin("clang-good"), bin("clang-ctx")
	tests := []struct {
		name      string
		exe       string
		argv, env []string
		files     []string
		maps      string
		want      []string
	}{
		{name: "plain C process", exe: "/usr/bin/app", argv: []string{"app"}, files: []string{good}, want: []string{"no-trace-context"}},
		{name: "C process with context", exe: "/usr/bin/app", argv: []string{"app"}, files: []string{good, ctx}, want: []string{}},
		{name: "OTEL_CTX mapping", exe: "/usr/bin/app", argv: []string{"app"}, files: []string{good},
			maps: "7f0000000000-7f0000001000 r--s 00000000 00:01 99 /memfd:OTEL_CTX (deleted)\n", want: []string{}},
		{name: "java without flag", exe: "/usr/lib/jvm/java-17/bin/java", argv: []string{"java", "-jar", "app.jar"}, files: []string{ctx},
			want: []string{"jvm-no-preserve-frame-pointer"}},
		{name: "java flag in argv", exe: "/usr/lib/jvm/java-17/bin/java", argv: []string{"java", "-XX:+PreserveFramePointer", "-jar", "a.jar"}, files: []string{ctx}, want: []string{}},
		{name: "java flag in env", exe: "/usr/bin/java", argv: []string{"java", "-jar", "a.jar"}, env: []string{"JAVA_TOOL_OPTIONS=-Xmx1g -XX:+PreserveFramePointer"}, files: []string{ctx}, want: []string{}},
		{name: "java flag turned off", exe: "/usr/bin/java", argv: []string{"java", "-XX:+PreserveFramePointer", "-XX:-PreserveFramePointer"}, files: []string{ctx},
			want: []string{"jvm-no-preserve-frame-pointer"}},
		{name: "node half flags", exe: "/usr/bin/node", argv: []string{"node", "--perf-basic-prof", "app.js"}, files: []string{ctx}, want: []string{"node-no-perf-flags"}},
		{name: "node flags in NODE_OPTIONS", exe: "/usr/bin/node", argv: []string{"node", "app.js"},
			env: []string{"NODE_OPTIONS=--perf-basic-prof --interpreted-frames-native-stack"}, files: []string{ctx}, want: []string{}},
		{name: "python 3.12 without perf", exe: "/usr/bin/python3.12", argv: []string{"python3", "app.py"}, files: []string{ctx}, want: []string{"python-no-perf"}},
		{name: "python 3.12 -X perf", exe: "/usr/bin/python3.12", argv: []string{"python3", "-X", "perf", "app.py"}, files: []string{ctx}, want: []string{}},
		{name: "python 3.13 env", exe: "/usr/bin/python3.13", argv: []string{"python3", "app.py"}, env: []string{"PYTHONPERFSUPPORT=1"}, files: []string{ctx}, want: []string{}},
		{name: "python 3.11 has no trampoline", exe: "/usr/bin/python3.11", argv: []string{"python3", "-X", "perf", "app.py"}, files: []string{ctx}, want: []string{"python-no-perf-support"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			pid := 100 + i
			fakeProc(t, root, pid, tt.exe, tt.argv, tt.env, tt.files, tt.maps)
			res := run(t, &Checker{ProcRoot: root, DebugRoot: t.TempDir()}, strconv.Itoa(pid))
			if got := ruleSet(res.Findings, false); !slices.Equal(got, tt.want) {
				t.Errorf("violations = %v, want %v\n%+v", got, tt.want, res.Findings)
			}
			if !strings.HasPrefix(res.Targets[0], "pid "+strconv.Itoa(pid)+" (") {
				t.Errorf("first target %q", res.Targets[0])
			}
		})
	}
}

// A file mapped by two checked processes is reported once.
func TestProcessSharedMappingOnce(t *testing.T) {
	needFixtures(t)
	root := t.TempDir()
	fakeProc(t, root, 11, "/usr/bin/a", []string{"a"}, nil, []string{bin("gcc-nofp")}, "")
	fakeProc(t, root, 12, "/usr/bin/b", []string{"b"}, nil, []string{bin("gcc-nofp")}, "")
	res := run(t, &Checker{ProcRoot: root}, "11", "12")
	n := 0
	for _, f := range res.Findings {
		if f.Rule == "frame-pointer-missing" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("frame-pointer-missing reported %d times, want 1", n)
	}
}

// A real process: the clang fixture waiting in pause().
func TestLivePID(t *testing.T) {
	needFixtures(t)
	cmd := exec.Command(bin("clang-good"), "sleep")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	exe, _ := filepath.Abs(bin("clang-good"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Wait until the child has exec'd the fixture.
		if l, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe"); err == nil && l == exe {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("child did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	res := run(t, &Checker{}, strconv.Itoa(cmd.Process.Pid))
	if !slices.Contains(res.Targets, exe) {
		t.Errorf("targets %v lack the executable %s", res.Targets, exe)
	}
	if !slices.Contains(ruleSet(res.Findings, false), "no-trace-context") {
		t.Errorf("no no-trace-context finding: %+v", res.Findings)
	}
	for _, f := range res.Findings {
		if f.Target == exe && f.violation() {
			t.Errorf("clean executable flagged: %+v", f)
		}
	}
}
