package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMaps(t *testing.T) {
	text := `55d0c0a00000-55d0c0a02000 r--p 00000000 fe:01 1234   /usr/bin/demo
55d0c0a02000-55d0c0a05000 r-xp 00002000 fe:01 1234   /usr/bin/demo
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
7f0000100000-7f0000200000 r-xp 00028000 fe:01 99 /usr/lib/my lib.so (deleted)
7ffc00000000-7ffc00002000 r-xp 00000000 00:00 0                          [vdso]
`
	ms, err := ParseMaps(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 {
		t.Fatalf("got %d executable mappings, want 4: %+v", len(ms), ms)
	}
	tests := []struct {
		i      int
		path   string
		offset uint64
		anon   bool
	}{
		{0, "/usr/bin/demo", 0x2000, false},
		{1, "", 0, true},
		{2, "/usr/lib/my lib.so (deleted)", 0x28000, false},
		{3, "[vdso]", 0, true},
	}
	for _, tt := range tests {
		m := ms[tt.i]
		if m.Path != tt.path || m.Offset != tt.offset || m.Anonymous() != tt.anon {
			t.Errorf("mapping %d = %+v, want path %q offset %#x anon %v", tt.i, m, tt.path, tt.offset, tt.anon)
		}
	}
	if _, err := ParseMaps(strings.NewReader("garbage\n")); err == nil {
		t.Error("garbage maps parsed without error")
	}
}

// TestParseMapsAllocations: under churn the tracker reads thousands of maps
// a second, mostly data lines; only the executable mappings kept may
// allocate.
func TestParseMapsAllocations(t *testing.T) {
	var text strings.Builder
	for i := range 200 {
		fmt.Fprintf(&text, "%x-%x rw-p 00000000 fe:01 77 /usr/lib/libdata.so\n", 0x7f0000000000+i*0x2000, 0x7f0000001000+i*0x2000)
	}
	text.WriteString("55d0c0a02000-55d0c0a05000 r-xp 00002000 fe:01 1234   /usr/bin/demo\n")
	b := []byte(text.String())
	allocs := testing.AllocsPerRun(20, func() {
		ms, err := parseMaps(b)
		if err != nil || len(ms) != 1 || ms[0].Path != "/usr/bin/demo" || ms[0].Dev != "fe:01" {
			t.Fatalf("parseMaps = %+v, %v", ms, err)
		}
	})
	// The result slice, the device and the path.
	if allocs > 3 {
		t.Errorf("parseMaps of 200 data lines and one code line: %.0f allocations, want at most 3", allocs)
	}
}

// TestTrackerReadsLargeProcFiles: procfs files larger than the reused
// buffer are read whole.
func TestTrackerReadsLargeProcFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "42")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var maps strings.Builder
	for i := range 2000 { // about 130 KB
		fmt.Fprintf(&maps, "%x-%x r-xp 00000000 00:00 0 \n", 0x7f0000000000+i*0x2000, 0x7f0000001000+i*0x2000)
	}
	env := strings.Repeat("FILLER=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\x00", 1000) + "OTEL_SERVICE_NAME=checkout\x00"
	for name, text := range map[string]string{"maps": maps.String(), "environ": env, "stat": "42 (svc) S 1 42 42 0 -1 4194560 0 0 0 0\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := NewTracker(root, nil).Get(42)
	if len(p.Mappings) != 2000 || p.Comm != "svc" || p.Env["OTEL_SERVICE_NAME"] != "checkout" {
		t.Fatalf("read %d mappings, comm %q, env %v; want 2000, svc, checkout", len(p.Mappings), p.Comm, p.Env)
	}
}

// TestStatComm: the command name comes from stat, as /proc/PID/comm
// shows it, also when it holds spaces and parentheses.
func TestStatComm(t *testing.T) {
	for stat, want := range map[string]string{
		"42 (svc) S 1 42 42 0 -1 4194560\n":     "svc",
		"42 (a) (b c) R 1 42 42 0 -1 4194560\n": "a) (b c",
		"42 () S 1\n":                           "",
		"garbage":                               "",
	} {
		if got := parseStat([]byte(stat)).comm; got != want {
			t.Errorf("parseStat(%q).comm = %q, want %q", stat, got, want)
		}
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip(err)
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := parseStat(stat).comm, strings.TrimSuffix(string(comm), "\n"); got != want {
		t.Errorf("parseStat(/proc/self/stat).comm = %q, /proc/self/comm %q", got, want)
	}
}

func TestParseCgroup(t *testing.T) {
	tests := []struct {
		name, text, cid, pod string
	}{
		{"docker", "0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ""},
		{"kubepods", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_1111_2222_3333_444455556666.slice/cri-containerd-abcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcd.scope\n", "abcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcd", "1a2b3c4d-1111-2222-3333-444455556666"},
		{"host", "0::/user.slice/user-0.slice/session-1.scope\n", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cid, pod := ParseCgroup(tt.text)
			if cid != tt.cid || pod != tt.pod {
				t.Fatalf("got (%q, %q), want (%q, %q)", cid, pod, tt.cid, tt.pod)
			}
		})
	}
}

func TestTrackerSelf(t *testing.T) {
	tr := NewTracker("/proc", nil)
	defer tr.Close()
	p := tr.Get(uint32(os.Getpid()))
	if p.Exited || len(p.Mappings) == 0 {
		t.Fatalf("own process not read: %+v", p)
	}
	exe, _ := os.Executable()
	m := p.Find(uint64(funcAddr()))
	if m == nil || m.Path != exe {
		t.Fatalf("mapping of own code = %+v, want path %s", m, exe)
	}
	f, err := os.Open(p.OpenPath(m))
	if err != nil {
		t.Fatalf("open mapping file: %v", err)
	}
	f.Close()
	if gone := tr.Get(1 << 30); !gone.Exited {
		t.Fatal("nonexistent pid not marked exited")
	}
}
