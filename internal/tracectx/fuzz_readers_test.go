package tracectx

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

// The readers take ELF files and memory of other processes: they must
// never panic, never allocate without bound, and never turn garbage into
// a context.

// memAt is a process address space holding data at base.
type memAt struct {
	base uint64
	data []byte
}

func (m memAt) ReadAt(p []byte, off int64) (int, error) {
	a := uint64(off)
	if off < 0 || a < m.base || a-m.base >= uint64(len(m.data)) {
		return 0, io.EOF
	}
	n := copy(p, m.data[a-m.base:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func FuzzFindThreadContext(f *testing.F) {
	// Seeds in testdata/fuzz: stripped fixture libraries and executables
	// exporting otel_thread_ctx_v1 (testdata/tracectx).
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		_, _ = findHook(ef, "fuzz")
		v, err := findThreadContext(ef, "fuzz")
		if err != nil {
			return
		}
		_, _ = v.MainProgramTPOffset()
		// Resolve reads the GOT slots from memory: let the file's own
		// bytes stand for it.
		mem := memAt{base: 0, data: data}
		for _, main := range []bool{true, false} {
			l, err := Resolve(mem, v, 0, main)
			if err != nil {
				continue
			}
			_, _, _ = ReadThreadContext(mem, 0x1000, l)
		}
	})
}

// FuzzReadThreadContext: a thread whose TLS pointer leads to bytes of
// any content, including an attrs_data_size that lies, yields an error or
// a context within the record's bounds.
func FuzzReadThreadContext(f *testing.F) {
	rec := rawRecord(1, 1, 0, nil)
	f.Add(uint8(0), int64(-8), append(ptrTo(0x2000), rec...))
	lying := rawRecord(1, 1, 0xffff, []byte{0, 3, 'a', 'b', 'c'})
	f.Add(uint8(0), int64(-8), append(ptrTo(0x2000), lying...))
	f.Add(uint8(1), int64(16), make([]byte, 64))
	f.Fuzz(func(t *testing.T, kind uint8, off int64, data []byte) {
		// Memory: data at 0x1ff8, the thread pointer at 0x2000 (so an
		// offset of -8 names data's first word).
		mem := memAt{base: 0x1ff8, data: data}
		l := Location{Kind: LocationStaticTP, Offset: off}
		if kind%2 == 1 {
			l = Location{Kind: LocationDTV, ModuleID: uint64(kind), Offset: off}
		}
		c, ok, err := ReadThreadContext(mem, 0x2000, l)
		if err != nil || !ok {
			if ok {
				t.Fatal("ok with an error")
			}
			return
		}
		if c.TraceID == [16]byte{} {
			t.Fatal("accepted an all-zero trace id")
		}
		n := 0
		for _, a := range c.Attrs {
			n += 2 + len(a.Value)
		}
		if n > RecordMaxAttrs {
			t.Fatalf("%d attribute bytes", n)
		}
	})
}

func ptrTo(addr uint64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, addr+8) // the record follows the pointer
	return b
}

// FuzzLoadProcessContext: an OTEL_CTX mapping of any content.
func FuzzLoadProcessContext(f *testing.F) {
	hdr := func(version, size uint32, published, ptr uint64) []byte {
		b := make([]byte, procCtxHeaderSize)
		copy(b, procCtxSignature)
		binary.NativeEndian.PutUint32(b[8:], version)
		binary.NativeEndian.PutUint32(b[12:], size)
		binary.NativeEndian.PutUint64(b[16:], published)
		binary.NativeEndian.PutUint64(b[24:], ptr)
		return b
	}
	payload := []byte{0x0a, 0x0c, 0x0a, 0x0a, 0x0a, 0x03, 'k', 'e', 'y', 0x12, 0x03, 0x0a, 0x01, 'v'}
	f.Add(append(hdr(2, uint32(len(payload)), 1, 0x10020), payload...))
	f.Add(append(hdr(1, uint32(len(payload)), 1, 0x10020), payload...)) // version 1: a bare Resource
	f.Add(hdr(2, 1<<31, 1, 0x10020))                                    // lying payload size
	f.Add(hdr(2, 16, 1, 0xffffffffffffff00))                            // pointer nowhere
	f.Add(hdr(2, 16, 0, 0x10020))                                       // forever mid-update
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := memAt{base: 0x10000, data: data}
		maps := []mapping{{start: 0x10000, end: 0x10000 + uint64(max(len(data), procCtxHeaderSize)), path: "/memfd:OTEL_CTX (deleted)"}}
		pc, err := loadProcessContext(mem, maps)
		if err == nil && pc == nil {
			t.Fatal("nil context without error")
		}
	})
}

// FuzzParseMaps: /proc/PID/maps lines of any shape.
func FuzzParseMaps(f *testing.F) {
	f.Add("55d0c0a00000-55d0c0a02000 r-xp 00000000 fe:01 1234   /usr/bin/demo\n7f00-7f01 rw-p 0 00:00 0 /memfd:OTEL_CTX (deleted)\n")
	f.Add("-\n")
	f.Add("1-2 r 3 4 5 6 7 8\n")
	f.Fuzz(func(t *testing.T, text string) {
		ms, err := parseMaps(strings.NewReader(text))
		if err != nil && ms != nil {
			t.Fatal("mappings with an error")
		}
		if errors.Is(err, io.EOF) {
			t.Fatal("EOF leaked as an error")
		}
	})
}
