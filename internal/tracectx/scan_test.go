package tracectx

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/internal/testutil"
)

// TestScanProbe runs each tlsprobe variant, scans it, and checks that the
// location Scan derives gives, for every thread, the address the thread
// itself printed for &otel_thread_ctx_v1, and that the record read from
// there holds the ids the thread published.
func TestScanProbe(t *testing.T) {
	testutil.RequireRoot(t, "reading another process's memory needs root")
	tests := []struct {
		name   string
		bin    string
		lib    string // dlopen argument
		env    []string
		module string // defining module, base name
		kind   LocationKind
		musl   bool
	}{
		{name: "exe gcc pie", bin: "tlsprobe-exe-gcc", module: "tlsprobe-exe-gcc", kind: LocationStaticTP},
		{name: "exe clang pie", bin: "tlsprobe-exe-clang", module: "tlsprobe-exe-clang", kind: LocationStaticTP},
		{name: "exe no pie", bin: "tlsprobe-exe-nopie", module: "tlsprobe-exe-nopie", kind: LocationStaticTP},
		{name: "exe 64-byte aligned TLS", bin: "tlsprobe-exe-align", module: "tlsprobe-exe-align", kind: LocationStaticTP},
		{name: "exe exporting one symbol", bin: "tlsprobe-exe-noexport", module: "tlsprobe-exe-noexport", kind: LocationStaticTP},
		{name: "DT_NEEDED library gcc", bin: "tlsprobe-lib", module: "libprobe.so", kind: LocationStaticTP},
		{name: "DT_NEEDED library clang", bin: "tlsprobe-lib-clang", module: "libprobe-clang.so", kind: LocationStaticTP},
		{name: "dlopen static surplus", bin: "tlsprobe-dlopen", lib: "libprobe.so", module: "libprobe.so", kind: LocationStaticTP},
		// The SDK's TLSDESC access in a library built with the
		// traditional dialect.
		{name: "DT_NEEDED library, traditional dialect", bin: "tlsprobe-lib-trad", module: "libprobe-trad.so", kind: LocationStaticTP},
		{name: "dlopen, traditional dialect, clang", bin: "tlsprobe-dlopen", lib: "libprobe-trad-clang.so", module: "libprobe-trad-clang.so", kind: LocationStaticTP},
		{
			name: "dlopen dynamic TLS", bin: "tlsprobe-dlopen", lib: "libprobe.so", module: "libprobe.so", kind: LocationDTV,
			env: []string{"GLIBC_TUNABLES=glibc.rtld.optional_static_tls=0"},
		},
		// musl: no .dynsym in a static binary; static TLS for DT_NEEDED
		// libraries; always dynamic TLS, through musl's own DTV, for
		// dlopen.
		{name: "musl static", bin: "tlsprobe-musl-static", module: "tlsprobe-musl-static", kind: LocationStaticTP, musl: true},
		{name: "musl DT_NEEDED library", bin: "tlsprobe-musl-lib", module: "libprobe-musl.so", kind: LocationStaticTP, musl: true},
		{name: "musl dlopen", bin: "tlsprobe-musl-dlopen", lib: "libprobe-musl.so", module: "libprobe-musl.so", kind: LocationDTV, musl: true},
	}
	// One Scanner for all processes, as the agent has: what it remembers
	// of libc, ld.so and the libraries shared by the probes must give
	// what reading them again gives.
	sc := NewScanner(64)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.musl && muslMissing != "" {
				t.Skip(muslMissing)
			}
			var args []string
			if tt.lib != "" {
				args = append(args, fixture(t, tt.lib))
			}
			p := startProbe(t, tt.env, fixture(t, tt.bin), args...)
			pid := p.cmd.Process.Pid
			info, err := Scan(pid)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				cached, err := sc.Scan(pid)
				if err != nil {
					t.Fatal(err)
				}
				if cached.ThreadContext != info.ThreadContext || cached.ThreadContextModule != info.ThreadContextModule ||
					fmt.Sprint(cached.Hooks, cached.Errors) != fmt.Sprint(info.Hooks, info.Errors) {
					t.Errorf("Scanner.Scan = %+v, Scan = %+v", cached, info)
				}
			}
			// Given the process as read by the caller (the tracker's
			// snapshot), the scan learns what its own reads give.
			viaRead, err := sc.ScanRead(pid, procRead(t, pid))
			if err != nil {
				t.Fatal(err)
			}
			if viaRead.ThreadContext != info.ThreadContext || viaRead.ThreadContextModule != info.ThreadContextModule ||
				viaRead.ServiceName != info.ServiceName || fmt.Sprint(viaRead.Hooks, viaRead.Errors) != fmt.Sprint(info.Hooks, info.Errors) {
				t.Errorf("Scanner.ScanRead = %+v, Scan = %+v", viaRead, info)
			}
			for _, e := range info.Errors {
				t.Errorf("scan problem: %v", e)
			}
			if info.ThreadContext.Kind != tt.kind || info.ThreadContext.Musl != (tt.musl && tt.kind == LocationDTV) {
				t.Fatalf("location %+v, want kind %v", info.ThreadContext, tt.kind)
			}
			if got := filepath.Base(info.ThreadContextModule); got != tt.module {
				t.Errorf("module %q, want %q", got, tt.module)
			}
			mem := openMem(t, pid)
			if len(p.threads) != 3 {
				t.Fatalf("probe printed %d threads, want 3", len(p.threads))
			}
			for _, th := range p.threads {
				addr, err := info.ThreadContext.Address(mem, th.tp)
				if err != nil {
					t.Fatalf("tid %d: %v", th.tid, err)
				}
				if addr != th.addr {
					t.Errorf("tid %d: address %#x, thread says %#x (tp %#x, location %+v)", th.tid, addr, th.addr, th.tp, info.ThreadContext)
				}
				c, ok, err := ReadThreadContext(mem, th.tp, info.ThreadContext)
				if err != nil || !ok {
					t.Fatalf("tid %d: read context: ok=%v err=%v", th.tid, ok, err)
				}
				if got := hex.EncodeToString(c.TraceID[:]); got != th.trace {
					t.Errorf("tid %d: trace_id %s, want %s", th.tid, got, th.trace)
				}
				if got := hex.EncodeToString(c.SpanID[:]); got != th.span {
					t.Errorf("tid %d: span_id %s, want %s", th.tid, got, th.span)
				}
				if c.TraceFlags != 1 || !slices.Equal(c.Attrs, []Attr{{Key: 0, Value: "probe"}}) {
					t.Errorf("tid %d: flags %d attrs %+v, want 1 [{0 probe}]", th.tid, c.TraceFlags, c.Attrs)
				}
			}
			if info.ServiceName != "tlsprobe" || info.Resource["service.instance.id"] != "probe-instance-1" ||
				info.Resource["deployment.environment.name"] != "test" {
				t.Errorf("service %q resource %v", info.ServiceName, info.Resource)
			}
			if !slices.Equal(info.AttributeKeyMap, []string{"probe.attr"}) {
				t.Errorf("attribute key map %v", info.AttributeKeyMap)
			}
			// The SDK publishes version 2 with a CLOCK_BOOTTIME stamp
			// taken before the probe said it was ready.
			pc, err := LoadProcessContext(pid)
			var boot unix.Timespec
			if err == nil {
				err = unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot)
			}
			if err != nil {
				t.Fatal(err)
			}
			if now := uint64(boot.Nano()); pc.Version != 2 || pc.PublishedAtNs == 0 || pc.PublishedAtNs > now || now-pc.PublishedAtNs > uint64(time.Minute) {
				t.Errorf("process context version %d published at %d ns of CLOCK_BOOTTIME, now %d", pc.Version, pc.PublishedAtNs, now)
			}
			if len(info.Hooks) != 0 {
				t.Errorf("hooks %+v, want none", info.Hooks)
			}
		})
	}
}

// TestScanHook checks that the uprobe offset of spanprof_set_trace_context
// lands on the function's code in the running process.
func TestScanHook(t *testing.T) {
	testutil.RequireRoot(t, "reading another process's memory needs root")
	bin := fixture(t, "workload-hook")
	w := startWorkload(t, bin, 2, 1)
	info, err := Scan(w.pid)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Hooks) != 1 {
		t.Fatalf("hooks %+v, want one", info.Hooks)
	}
	h := info.Hooks[0]
	if h.Path != bin {
		t.Errorf("hook path %q, want %q", h.Path, bin)
	}
	if info.ThreadContext.Kind != LocationNone {
		t.Errorf("thread context %+v, want none", info.ThreadContext)
	}
	// The bytes at the file offset must be the bytes at the symbol's
	// run-time address.
	f, err := elf.Open(h.OpenPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	idx := slices.IndexFunc(syms, func(s elf.Symbol) bool { return s.Name == HookSymbol })
	if idx < 0 {
		t.Fatal("hook symbol missing")
	}
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	want := raw[h.Offset : h.Offset+16]
	maps, err := readMaps(w.pid)
	if err != nil {
		t.Fatal(err)
	}
	var bias uint64
	for _, m := range maps {
		if m.path == bin && m.off == 0 {
			bias, _ = loadBias(f.Progs, m)
			break
		}
	}
	got := make([]byte, 16)
	if _, err := openMem(t, w.pid).ReadAt(got, int64(bias+syms[idx].Value)); err != nil {
		t.Fatal(err)
	}
	// A uprobe on the hook (a spanprof running alongside, as the e2e
	// tests do) shows as an int3 in the first byte; the rest must match.
	if got[0] == 0xcc {
		got[0] = want[0]
	}
	if !bytes.Equal(got, want) {
		t.Errorf("code at run-time address %x, at file offset %#x %x", got, h.Offset, want)
	}
}

func TestServiceNameFromEnv(t *testing.T) {
	tests := []struct {
		name, env, want string
	}{
		{"none", "PATH=/bin\x00HOME=/root\x00", ""},
		{"service name", "OTEL_SERVICE_NAME=api\x00", "api"},
		{"resource attributes", "OTEL_RESOURCE_ATTRIBUTES=a=b, service.name=web\x00", "web"},
		{"service name wins", "OTEL_RESOURCE_ATTRIBUTES=service.name=web\x00OTEL_SERVICE_NAME=api\x00", "api"},
		{"empty service name", "OTEL_SERVICE_NAME=\x00OTEL_RESOURCE_ATTRIBUTES=service.name=web", "web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serviceNameFromEnv([]byte(tt.env)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseMaps(t *testing.T) {
	in := "55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1234 /usr/bin/x y\n" +
		"7f0000000000-7f0000001000 rw-p 00000000 00:01 77 /memfd:OTEL_CTX (deleted)\n" +
		"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n" +
		"7f1000000000-7f1000001000 rw-p 00000000 00:00 0 \n"
	got, err := parseMaps(bytes.NewBufferString(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{
		{start: 0x55d0c0a00000, end: 0x55d0c0a01000, perms: "r--p", dev: "fd:01", inode: 1234, path: "/usr/bin/x y"},
		{start: 0x7f0000000000, end: 0x7f0000001000, perms: "rw-p", dev: "00:01", inode: 77, path: "/memfd:OTEL_CTX (deleted)"},
		{start: 0x7ffd00000000, end: 0x7ffd00021000, perms: "rw-p", dev: "00:00", path: "[stack]"},
		{start: 0x7f1000000000, end: 0x7f1000001000, perms: "rw-p", dev: "00:00"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// procRead reads what a ProcRead holds of pid, the whole environment
// included (ScanRead reads only its OTEL entries).
func procRead(t *testing.T, pid int) *ProcRead {
	t.Helper()
	var r ProcRead
	var err error
	if r.Maps, err = os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); err != nil {
		t.Fatal(err)
	}
	r.Environ, r.EnvErr = os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	r.Exe = new(unix.Stat_t)
	if err := unix.Stat(fmt.Sprintf("/proc/%d/exe", pid), r.Exe); err != nil {
		t.Fatal(err)
	}
	return &r
}

func TestScanReadService(t *testing.T) {
	// The read's environment names the service: the scan takes it from
	// there, not from /proc.
	self := os.Getpid()
	r := procRead(t, self)
	r.Environ = []byte("OTEL_RESOURCE_ATTRIBUTES=a=b,service.name=from-attrs\x00")
	info, err := NewScanner(8).ScanRead(self, r)
	if err != nil {
		t.Fatal(err)
	}
	if info.ServiceName != "from-attrs" {
		t.Errorf("service %q, want from-attrs (the read's environment)", info.ServiceName)
	}
	r.Environ, r.EnvErr = nil, os.ErrNotExist
	if info, err = NewScanner(8).ScanRead(self, r); err != nil {
		t.Fatal(err)
	}
	if info.ServiceName != "" || !slices.ContainsFunc(info.Errors, func(e error) bool { return errors.Is(e, os.ErrNotExist) }) {
		t.Errorf("service %q, errors %v: want none, and the read's environment error", info.ServiceName, info.Errors)
	}
}

// TestScanMappedData: a mapped file that is not ELF (a font, a locale
// archive) is no module and no error, and it is remembered, so that the
// next scan does not open it again; a broken ELF file stays an error.
func TestScanMappedData(t *testing.T) {
	dir := t.TempDir()
	mapFile := func(name string, b []byte) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), 0, len(b), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(m) })
	}
	mapFile("font.ttf", bytes.Repeat([]byte("not an ELF file "), 512))
	mapFile("broken.so", append([]byte("\x7fELF\x02\x01\x01\x00"), make([]byte, 8184)...))
	self := os.Getpid()
	sc := NewScanner(64)
	for scan := range 2 {
		info, err := sc.ScanRead(self, procRead(t, self))
		if err != nil {
			t.Fatal(err)
		}
		var font, broken bool
		for _, e := range info.Errors {
			font = font || bytes.Contains([]byte(e.Error()), []byte("font.ttf"))
			broken = broken || bytes.Contains([]byte(e.Error()), []byte("broken.so"))
		}
		if font || !broken {
			t.Errorf("scan %d: errors %v: want one for broken.so, none for font.ttf", scan+1, info.Errors)
		}
	}
	notELF := 0
	sc.mu.Lock()
	for k, fs := range sc.files {
		if fs.notELF {
			notELF++
			if filepath.Base(k.path) != "font.ttf" {
				t.Errorf("%s remembered as not ELF", k.path)
			}
		}
	}
	sc.mu.Unlock()
	if notELF != 1 {
		t.Errorf("%d files remembered as not ELF, want font.ttf alone", notELF)
	}
}
