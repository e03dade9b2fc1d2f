package symbolize

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestParseKallsyms(t *testing.T) {
	const table = `ffffffff81000000 T _stext
ffffffff81000100 T schedule
ffffffff81000100 t __schedule_alias
ffffffff81000200 D some_data
ffffffff81000300 t do_work
ffffffffc0001000 t nf_hook	[nf_tables]
ffffffffc0001100 t nf_other	[nf_tables]
`
	k, err := parseKallsyms(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr         uint64
		name, module string
		ok           bool
	}{
		{0xffffffff81000000, "_stext", "", true},
		{0xffffffff81000150, "schedule", "", true},
		{0xffffffff81000250, "", "", false}, // data
		{0xffffffff81000300, "do_work", "", true},
		{0xffffffff81000300 + maxKernelSymbolSize, "", "", false},
		{0xffffffffc0001010, "nf_hook", "nf_tables", true},
		{0xffffffffc0001100, "nf_other", "nf_tables", true},
		{0xffffffff80000000, "", "", false},
	}
	for _, tt := range tests {
		name, module, ok := k.Lookup(tt.addr)
		if ok != tt.ok || module != tt.module || (tt.ok && name != tt.name && !(tt.name == "schedule" && name == "__schedule_alias")) {
			t.Errorf("Lookup(%#x) = %q, %q, %v; want %q, %q, %v", tt.addr, name, module, ok, tt.name, tt.module, tt.ok)
		}
	}
	if name, mod, ok := k.Resolve(0xffffffffc0001010); !ok || name != "nf_hook" || k.Modules()[mod].Path != "[nf_tables]" {
		t.Errorf("Resolve(module address) = %q, module %d (%+v), %v; want nf_hook in [nf_tables]", name, mod, k.Modules(), ok)
	}
	if _, mod, ok := k.Resolve(0xffffffff80000000); ok || mod != 0 || k.Modules()[0].Path != "[kernel.kallsyms]" {
		t.Errorf("Resolve(unknown address) = module %d, %v; want the kernel image, not found", mod, ok)
	}

	_, err = parseKallsyms(strings.NewReader("0000000000000000 T _stext\n0000000000000000 T schedule\n"))
	if !errors.Is(err, ErrKptrRestricted) {
		t.Errorf("all-zero kallsyms: err = %v, want ErrKptrRestricted", err)
	}
}

func TestProcKallsyms(t *testing.T) {
	k, err := LoadKallsyms("/proc/kallsyms")
	if errors.Is(err, ErrKptrRestricted) {
		t.Skip("kallsyms addresses are hidden (kptr_restrict or not root)")
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"schedule", "do_nanosleep", "__x64_sys_clock_nanosleep"} {
		addr, ok := k.Address(fn)
		if !ok {
			t.Fatalf("%s not in kallsyms", fn)
		}
		name, module, ok := k.Lookup(addr + 4)
		if !ok || name != fn || module != "" {
			t.Errorf("Lookup(%s+4) = %q, %q, %v", fn, name, module, ok)
		}
	}
	if _, err := os.Stat("/sys/kernel/notes"); err == nil {
		if id := k.Modules()[0].BuildID; len(id) != 40 {
			t.Errorf("kernel build ID = %q, want 40 hex digits", id)
		}
	}
}

// TestKallsymsPfxShareNames checks that a __pfx_X symbol and X, on
// kernels with call padding, keep one copy of the name X and still
// resolve to their own names.
func TestKallsymsPfxShareNames(t *testing.T) {
	const table = `ffffffff81000000 T _stext
ffffffff810000f0 T __pfx_schedule
ffffffff81000100 T schedule
ffffffff810001f0 t __pfx_do_work
ffffffff81000200 t do_work_other
ffffffff810002f0 t __pfx_
ffffffffc0000ff0 t __pfx_nf_hook	[nf_tables]
ffffffffc0001000 t nf_hook	[nf_tables]
`
	k, err := parseKallsyms(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr         uint64
		name, module string
	}{
		{0xffffffff810000f4, "__pfx_schedule", ""},
		{0xffffffff81000104, "schedule", ""},
		{0xffffffff810001f4, "__pfx_do_work", ""}, // not followed by do_work
		{0xffffffff81000204, "do_work_other", ""},
		{0xffffffff810002f4, "__pfx_", ""}, // nothing after the prefix: a plain name
		{0xffffffffc0000ff4, "__pfx_nf_hook", "nf_tables"},
		{0xffffffffc0001004, "nf_hook", "nf_tables"},
	}
	for _, tt := range tests {
		if name, module, ok := k.Lookup(tt.addr); !ok || name != tt.name || module != tt.module {
			t.Errorf("Lookup(%#x) = %q, %q, %v; want %q, %q", tt.addr, name, module, ok, tt.name, tt.module)
		}
		if a, ok := k.Address(tt.name); !ok || tt.addr-a != 4 {
			t.Errorf("Address(%q) = %#x, %v", tt.name, a, ok)
		}
	}
	if want := "_stextscheduledo_workdo_work_other__pfx_nf_hook"; string(k.names) != want {
		t.Errorf("names stored %q, want %q", k.names, want)
	}
}

// TestProcKallsymsNames checks every symbol of /proc/kallsyms against its
// line: each address keeps the names its lines give it.
func TestProcKallsymsNames(t *testing.T) {
	k, err := LoadKallsyms("/proc/kallsyms")
	if errors.Is(err, ErrKptrRestricted) {
		t.Skip("kallsyms addresses are hidden (kptr_restrict or not root)")
	}
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]map[string]int{}
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		addr, _, name, _, ok := splitKallsymsLine([]byte(line))
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		if want[addr] == nil {
			want[addr] = map[string]int{}
		}
		want[addr][string(name)]++
		lines++
	}
	if k.Len() != lines {
		t.Errorf("%d symbols for %d lines", k.Len(), lines)
	}
	for _, s := range k.syms {
		name := k.name(s)
		if want[s.addr][name] == 0 {
			t.Fatalf("symbol at %#x named %q, which no line gives it", s.addr, name)
		}
		want[s.addr][name]--
	}
	t.Logf("%d symbols, %d bytes of names for %d in the file", k.Len(), len(k.names), len(data))
}
