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
	f := k.Frames(nil, 0xffffffffc0001010)
	if f[0].Mapping.Path != "[nf_tables]" || !f[0].Mapping.Kernel {
		t.Errorf("module frame mapping = %+v", f[0].Mapping)
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
		f := k.Frames(nil, 0)
		if len(f[0].Mapping.BuildID) != 40 {
			t.Errorf("kernel build ID = %q, want 40 hex digits", f[0].Mapping.BuildID)
		}
	}
}
