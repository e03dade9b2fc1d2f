package tracectx

import (
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// nodeMem is a sparse address space of 8-byte words and raw bytes.
type nodeMem map[uint64]byte

func (m nodeMem) word(addr, v uint64) {
	for i := 0; i < 8; i++ {
		m[addr+uint64(i)] = byte(v >> (8 * i))
	}
}

func (m nodeMem) ReadAt(b []byte, off int64) (int, error) {
	for i := range b {
		v, ok := m[uint64(off)+uint64(i)]
		if !ok {
			return i, io.EOF
		}
		b[i] = v
	}
	return len(b), nil
}

func smiWord(v int64) uint64 { return uint64(v) << 32 }

// nodeHeap lays out the chain ReadNodeContext walks: discovery struct,
// CPED slot, AsyncContextFrame with a 2-bucket OrderedHashMap holding
// (other, x) and (als, value), the value's map and its record.
type nodeHeap struct {
	mem                                        nodeMem
	disc, cped, frame, table, als, value, vmap uint64
	rec, undef                                 uint64
}

func newNodeHeap(t *testing.T) *nodeHeap {
	h := &nodeHeap{mem: nodeMem{}, disc: 0x10000, cped: 0x20000, frame: 0x30001, table: 0x40001,
		als: 0x50001, value: 0x60001, vmap: 0x70001, rec: 0x80000, undef: 0x90001}
	m := h.mem
	const hash = 7 // bucket 7 & 1 = 1
	m.word(h.disc, h.cped)
	m.word(h.disc+8, 0x11000) // global handle slot
	m.word(0x11000, h.als)
	m.word(h.disc+16, hash)
	m.word(h.disc+24, h.undef)
	m.word(h.cped, h.frame)
	m.word(h.frame-1+24, h.table)
	base := h.table - 1
	buckets := int64(2)
	m.word(base, 0xdead1)                          // map
	m.word(base+8, smiWord(3+buckets+2*buckets*3)) // length
	m.word(base+16, smiWord(2))                    // elements
	m.word(base+24, smiWord(0))                    // deleted
	m.word(base+32, smiWord(buckets))              // buckets
	m.word(base+40, smiWord(-1))                   // bucket 0
	m.word(base+48, smiWord(1))                    // bucket 1: entry 1
	e := func(i int64) uint64 { return base + 16 + 8*uint64(3+buckets+3*i) }
	m.word(e(0), 0x12341) // entry 0: another store
	m.word(e(0)+8, h.undef)
	m.word(e(0)+16, smiWord(-1))
	m.word(e(1), 0xabc01) // entry 1: a key of the bucket, not ours
	m.word(e(1)+8, h.undef)
	m.word(e(1)+16, smiWord(2)) // chain: entry 2
	m.word(base+16, smiWord(3)) // three elements then
	m.word(e(2), h.als)         // entry 2: ours
	m.word(e(2)+8, h.value)
	m.word(e(2)+16, smiWord(-1))
	m.word(h.value-1, h.vmap)
	m.word(h.value-1+8, 0)
	m.word(h.value-1+16, 0)
	m.word(h.value-1+24, 0)
	m.word(h.value-1+32, h.rec)
	m.word(h.vmap-1, 0)
	m.word(h.vmap-1+8, 0)
	h.setType(0x422) // an API object
	rec, err := EncodeRecord(Context{TraceID: [16]byte{1, 2, 3}, SpanID: [8]byte{4, 5}, Attrs: []Attr{{Key: 0, Value: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range rec {
		m[h.rec+uint64(i)] = b
	}
	return h
}

func (h *nodeHeap) setType(t uint16) {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], t)
	h.mem[h.vmap-1+12], h.mem[h.vmap-1+13] = b[0], b[1]
}

func TestReadNodeContext(t *testing.T) {
	h := newNodeHeap(t)
	c, ok, err := ReadNodeContext(h.mem, h.disc, DefaultNodeLayout())
	if err != nil || !ok {
		t.Fatalf("walk: ok=%v err=%v", ok, err)
	}
	if c.TraceID != [16]byte{1, 2, 3} || c.SpanID != [8]byte{4, 5} || len(c.Attrs) != 1 || c.Attrs[0].Value != "x" {
		t.Fatalf("read %+v", c)
	}
}

// Every broken step gives no context: outside a span (ok false, no error)
// or a failed walk (an error naming the step), never ids.
func TestReadNodeContextRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(h *nodeHeap)
		step    string // "" when the thread reads as outside spans
	}{
		{"writer not set up", func(h *nodeHeap) { h.mem.word(h.disc, 0) }, ""},
		{"no frame", func(h *nodeHeap) { h.mem.word(h.cped, h.undef) }, ""},
		{"store holds undefined", func(h *nodeHeap) { h.mem.word(h.table-1+16+8*uint64(3+2+3*2)+8, h.undef) }, ""},
		{"key absent", func(h *nodeHeap) { h.mem.word(h.table-1+16+8*uint64(3+2+3*2), 0x77701) }, ""},
		{"frame not a heap object", func(h *nodeHeap) { h.mem.word(h.cped, 0x30000) }, "frame"},
		{"table unreadable", func(h *nodeHeap) { h.mem.word(h.frame-1+24, 0xf0001) }, "table"},
		{"buckets not a power of two", func(h *nodeHeap) { h.mem.word(h.table-1+32, smiWord(3)) }, "table"},
		{"length wrong", func(h *nodeHeap) { h.mem.word(h.table-1+8, smiWord(99)) }, "table"},
		{"count not a Smi", func(h *nodeHeap) { h.mem.word(h.table-1+16, 5) }, "table"},
		{"entry out of range", func(h *nodeHeap) { h.mem.word(h.table-1+48, smiWord(9)) }, "entry"},
		{"chain loops", func(h *nodeHeap) { h.mem.word(h.table-1+16+8*uint64(3+2+3*1)+16, smiWord(1)) }, "entry"},
		{"value not an API object", func(h *nodeHeap) { h.setType(0x83) }, "value map"},
		{"embedder field not aligned", func(h *nodeHeap) { h.mem.word(h.value-1+32, h.rec+3) }, "wrap"},
		{"record not valid", func(h *nodeHeap) { h.mem[h.rec+24] = 0 }, "record"},
		{"record unreadable", func(h *nodeHeap) { h.mem.word(h.value-1+32, 0xe0000) }, "record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newNodeHeap(t)
			tc.breakIt(h)
			c, ok, err := ReadNodeContext(h.mem, h.disc, DefaultNodeLayout())
			if ok || c.TraceID != ([16]byte{}) {
				t.Fatalf("read a context: %+v", c)
			}
			var we *NodeWalkError
			switch {
			case tc.step == "" && err != nil:
				t.Fatalf("want outside spans, got %v", err)
			case tc.step != "" && (!errors.As(err, &we) || we.Step != tc.step):
				t.Fatalf("want a failed %q step, got %v", tc.step, err)
			}
		})
	}
}
