package sampler

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/clock"
)

// mapsRecord builds a proc_maps record as the program sends it: the
// header, then each entry and its names, 8-byte aligned, cut after the
// last.
type mapsRecord struct {
	nr   uint32
	data []byte
}

func (r *mapsRecord) add(start, end, off, ino uint64, dev uint32, flags bpf.ExitMapsProcVmaFlag, names ...string) {
	var name []byte
	for _, n := range names {
		name = append(append(name, n...), 0)
	}
	v := bpf.ExitMapsProcVma{Start: start, End: end, Offset: off, Ino: ino, Dev: dev, Flags: uint16(flags), NameLen: uint16(len(name))}
	r.data = append(r.data, unsafe.Slice((*byte)(unsafe.Pointer(&v)), procVmaSize)...)
	r.data = append(r.data, name...)
	for len(r.data)%8 != 0 {
		r.data = append(r.data, 0xee) // the program's pad is whatever the scratch held
	}
	r.nr++
}

func (r *mapsRecord) bytes(pid uint32) []byte {
	h := bpf.ExitMapsProcMaps{Tag: uint64(bpf.ExitMapsRecordTagREC_PROC_MAPS), KtimeNs: 1e9, Pid: pid, Nr: r.nr, Dropped: 2, Len: uint32(len(r.data))}
	return append(append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&h)), procMapsHeader)...), r.data...)
}

func TestDecodeProcMaps(t *testing.T) {
	const (
		full = bpf.ExitMapsProcVmaFlagPROC_VMA_PATH_FULL
		exe  = bpf.ExitMapsProcVmaFlagPROC_VMA_EXE
		same = bpf.ExitMapsProcVmaFlagPROC_VMA_SAME_FILE
		vdso = bpf.ExitMapsProcVmaFlagPROC_VMA_VDSO
	)
	var r mapsRecord
	r.add(0x7f0000400000, 0x7f0000500000, 0x1000, 12, 0xfe00001, full, "libc.so.6", "x86_64-linux-gnu", "lib", "usr")
	r.add(0x55000000, 0x55001000, 0x1000, 7, 0xfe00001, full|exe, "demo", "bin")
	r.add(0x55002000, 0x55003000, 0x3000, 7, 0xfe00001, same|exe)
	r.add(0x7f0000100000, 0x7f0000101000, 0, 9, 0x800002, 0, "libpart.so", "deep") // path did not reach the root
	r.add(0x7ffd00000000, 0x7ffd00002000, 0, 0, 0, vdso)
	d := newDecoder(clock.NewConverter())
	rec, pe, err := d.decode(r.bytes(42))
	if err != nil || rec != nil || pe == nil {
		t.Fatalf("decode: %v, %v, %v", rec, pe, err)
	}
	if pe.PID != 42 || !pe.Exit || pe.MapsDropped != 2 || pe.Exe != "/bin/demo" {
		t.Errorf("event %+v", pe)
	}
	want := []VMA{
		{Start: 0x55000000, End: 0x55001000, Offset: 0x1000, Inode: 7, Dev: "fe:01", Path: "/bin/demo"},
		{Start: 0x55002000, End: 0x55003000, Offset: 0x3000, Inode: 7, Dev: "fe:01", Path: "/bin/demo"},
		{Start: 0x7f0000100000, End: 0x7f0000101000, Inode: 9, Dev: "08:02", Path: "deep/libpart.so"},
		{Start: 0x7f0000400000, End: 0x7f0000500000, Offset: 0x1000, Inode: 12, Dev: "fe:01", Path: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{Start: 0x7ffd00000000, End: 0x7ffd00002000, Dev: "00:00", Path: "[vdso]"},
	}
	if len(pe.Maps) != len(want) {
		t.Fatalf("maps %+v", pe.Maps)
	}
	for i := range want {
		if pe.Maps[i] != want[i] {
			t.Errorf("mapping %d = %+v, want %+v", i, pe.Maps[i], want[i])
		}
	}

	good := r.bytes(42)
	tests := []struct {
		name string
		raw  func() []byte
	}{
		{"cut short", func() []byte { return good[:len(good)-8] }},
		{"header only, entries claimed", func() []byte { return good[:procMapsHeader] }},
		{"too many entries", func() []byte {
			b := append([]byte(nil), good...)
			binary.LittleEndian.PutUint32(b[unsafe.Offsetof(bpf.ExitMapsProcMaps{}.Nr):], 6)
			return b
		}},
		{"name past the end", func() []byte {
			var r mapsRecord
			r.add(0x1000, 0x2000, 0, 1, 1, full, "x")
			b := r.bytes(1)
			binary.LittleEndian.PutUint16(b[procMapsHeader+int(unsafe.Offsetof(bpf.ExitMapsProcVma{}.NameLen)):], 200)
			return b
		}},
		{"empty range", func() []byte {
			var r mapsRecord
			r.add(0x2000, 0x2000, 0, 1, 1, full, "x")
			return r.bytes(1)
		}},
		{"unknown tag", func() []byte {
			b := append([]byte(nil), good...)
			binary.LittleEndian.PutUint64(b, 1<<63|77)
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r, pe, err := d.decode(tt.raw()); err == nil {
				t.Fatalf("decoded %v %+v", r, pe)
			}
		})
	}
}
