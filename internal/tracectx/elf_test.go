package tracectx

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

func TestMainProgramTPOffset(t *testing.T) {
	tests := []struct {
		name                string
		value, vaddr, memsz uint64
		align               uint64
		want                int64
	}{
		{name: "one pointer", value: 8, vaddr: 0x5dc8, memsz: 0x10, align: 8, want: -8},
		{name: "first variable", value: 0, vaddr: 0x5dc8, memsz: 0x10, align: 8, want: -16},
		{name: "size rounded to alignment", value: 0x30, vaddr: 0x5d80, memsz: 0x38, align: 0x40, want: -0x10},
		{name: "alignment 0 means 1", value: 2, vaddr: 0x1001, memsz: 3, align: 0, want: -1},
		// p_vaddr not aligned to p_align: glibc keeps the block's
		// misalignment (firstbyte) relative to the thread pointer.
		{name: "misaligned p_vaddr", value: 0, vaddr: 0x1008, memsz: 0x10, align: 0x20, want: -0x18},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &TLSVar{Defined: true, Executable: true, Value: tt.value, TLSVaddr: tt.vaddr, TLSMemsz: tt.memsz, TLSAlign: tt.align}
			got, err := v.MainProgramTPOffset()
			if err != nil || got != tt.want {
				t.Errorf("got %d %v, want %d", got, err, tt.want)
			}
		})
	}
	if _, err := (&TLSVar{Defined: true}).MainProgramTPOffset(); err == nil {
		t.Error("offset for a shared library")
	}
}

func TestFindThreadContext(t *testing.T) {
	tests := []struct {
		file       string
		executable bool
		relocs     []RelocKind
	}{
		{file: "tlsprobe-exe-gcc", executable: true},
		{file: "tlsprobe-exe-nopie", executable: true},
		{file: "tlsprobe-exe-noexport", executable: true},
		{file: "libprobe.so", relocs: []RelocKind{RelocTLSDesc}},
		{file: "libprobe-clang.so", relocs: []RelocKind{RelocTLSDesc}},
		// Built without -mtls-dialect=gnu2: the test's own probe_addr
		// takes the address the traditional way, the SDK's accesses
		// still go through a descriptor.
		{file: "libprobe-trad.so", relocs: []RelocKind{RelocTLSDesc, RelocDTPMod}},
		{file: "libprobe-trad-clang.so", relocs: []RelocKind{RelocTLSDesc, RelocDTPMod}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			v, err := FindThreadContext(fixture(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if !v.Defined || v.Executable != tt.executable || v.TLSMemsz < 8 {
				t.Errorf("%+v", v)
			}
			var kinds []RelocKind
			for _, r := range v.Relocs {
				kinds = append(kinds, r.Kind)
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, tt.relocs) {
				t.Errorf("relocations %v, want %v", v.Relocs, tt.relocs)
			}
		})
	}
	if _, err := FindThreadContext(fixture(t, "workload-hook")); !errors.Is(err, ErrNotFound) {
		t.Errorf("hook-only binary: %v, want ErrNotFound", err)
	}
	if off, err := FindHook(fixture(t, "workload-hook")); err != nil || off == 0 {
		t.Errorf("FindHook: %#x %v", off, err)
	}
	if _, err := FindHook(fixture(t, "workload-gcc")); !errors.Is(err, ErrNotFound) {
		t.Errorf("FindHook without hook: %v, want ErrNotFound", err)
	}
}

func u64s(ws ...uint64) []byte {
	b := make([]byte, 8*len(ws))
	for i, w := range ws {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	return b
}

func TestResolve(t *testing.T) {
	const bias, got, arg = 0x7f0000000000, 0x4000, 0x5600000000
	tests := []struct {
		name    string
		v       TLSVar
		mem     map[uint64][]byte
		main    bool
		want    Location
		wantErr error
	}{
		{
			name: "main program needs no slot", main: true,
			v:    TLSVar{Defined: true, Executable: true, Value: 8, TLSMemsz: 16, TLSAlign: 8},
			want: Location{Kind: LocationStaticTP, Offset: -8},
		},
		{
			name: "TLSDESC static", v: TLSVar{Defined: true, Relocs: []TLSReloc{{Kind: RelocTLSDesc, Addr: got, Named: true}}},
			mem:  map[uint64][]byte{bias + got: u64s(0x7f00deadbeef, uint64(0xffffffffffffff68))},
			want: Location{Kind: LocationStaticTP, Offset: -0x98},
		},
		{
			name: "TLSDESC dynamic", v: TLSVar{Defined: true, Relocs: []TLSReloc{{Kind: RelocTLSDesc, Addr: got, Named: true}}},
			mem: map[uint64][]byte{
				bias + got: u64s(0x7f00deadbeef, arg),
				arg:        u64s(3, 8, 1),
			},
			want: Location{Kind: LocationDTV, ModuleID: 3, Offset: 8},
		},
		{
			name: "TLSDESC not relocated", v: TLSVar{Defined: true, Relocs: []TLSReloc{{Kind: RelocTLSDesc, Addr: got, Named: true}}},
			mem:     map[uint64][]byte{bias + got: u64s(0, 0)},
			wantErr: ErrUnresolved,
		},
		{
			name: "initial-exec slot preferred", v: TLSVar{Relocs: []TLSReloc{
				{Kind: RelocDTPMod, Addr: got + 16, Named: true}, {Kind: RelocTPOff, Addr: got, Named: true}}},
			mem:  map[uint64][]byte{bias + got: u64s(uint64(0xfffffffffffffff0), 2, 8)},
			want: Location{Kind: LocationStaticTP, Offset: -16},
		},
		{
			name: "general dynamic", v: TLSVar{Relocs: []TLSReloc{{Kind: RelocDTPMod, Addr: got, Named: true}}},
			mem:  map[uint64][]byte{bias + got: u64s(2, 24)},
			want: Location{Kind: LocationDTV, ModuleID: 2, Offset: 24},
		},
		{
			name: "local dynamic takes st_value", v: TLSVar{Defined: true, Value: 40, Relocs: []TLSReloc{{Kind: RelocDTPMod, Addr: got}}},
			mem:  map[uint64][]byte{bias + got: u64s(4, 0)},
			want: Location{Kind: LocationDTV, ModuleID: 4, Offset: 40},
		},
		{name: "no slot", v: TLSVar{Defined: true}, wantErr: ErrUnresolved},
		{
			name: "garbage module id", v: TLSVar{Relocs: []TLSReloc{{Kind: RelocDTPMod, Addr: got, Named: true}}},
			mem:     map[uint64][]byte{bias + got: u64s(1<<40, 0)},
			wantErr: ErrUnresolved,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc, err := Resolve(&fakeMem{regions: tt.mem}, &tt.v, bias, tt.main)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if loc != tt.want {
				t.Errorf("location %+v, want %+v", loc, tt.want)
			}
		})
	}
}

func TestAddressDTV(t *testing.T) {
	const fs, dtvArr, block = 0x7f0000001000, 0x5500000000, 0x5600000000
	// dtv[-1] = 4 slots, dtv[0] = generation, dtv[1..4]
	dtv := u64s(4, 0, 1, 0, 0x7f0000000f00, 0, block, 0, ^uint64(0), 0, 0, 0)
	mem := &fakeMem{regions: map[uint64][]byte{
		fs:     u64s(fs, dtvArr+16),
		dtvArr: dtv,
	}}
	tests := []struct {
		module  uint64
		want    uint64
		wantErr error
	}{
		{module: 1, want: 0x7f0000000f00 + 8},
		{module: 2, want: block + 8},
		{module: 3, wantErr: ErrNoTLSBlock},
		{module: 4, wantErr: ErrNoTLSBlock},
		{module: 5, wantErr: ErrNoTLSBlock},
	}
	for _, tt := range tests {
		got, err := Location{Kind: LocationDTV, ModuleID: tt.module, Offset: 8}.Address(mem, fs)
		if !errors.Is(err, tt.wantErr) || got != tt.want {
			t.Errorf("module %d: %#x %v, want %#x %v", tt.module, got, err, tt.want, tt.wantErr)
		}
	}
}
