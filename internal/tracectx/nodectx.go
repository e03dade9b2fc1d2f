package tracectx

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// NodeDiscoverySymbol is the thread-local discovery struct of the Node.js
// writer of OTEP 4947 records (@datadog/pprof's addon, used by dd-trace):
//
//	struct { Address *cped_slot; Global<Object> als; int32 als_hash; Address undefined; }
//
// cped_slot points at the isolate's continuation-preserved embedder data,
// whose value is the current AsyncContextFrame (a JS Map subclass); als is
// a global handle (a pointer to a slot holding the AsyncLocalStorage's
// tagged address); als_hash is that object's identity hash; undefined is the
// tagged address of the isolate's undefined.
const NodeDiscoverySymbol = "otel_thread_ctx_nodejs_v1"

// NodeDiscoverySize is the struct's size on 64-bit targets.
const NodeDiscoverySize = 32

// FindNodeDiscovery reads openPath's .dynsym for otel_thread_ctx_nodejs_v1
// (STT_TLS) and the relocations that reach it.
func FindNodeDiscovery(openPath string) (*TLSVar, error) {
	f, err := elf.Open(openPath)
	if err != nil {
		return nil, fmt.Errorf("open ELF: %w", err)
	}
	defer f.Close()
	ds, err := readDynsym(f)
	if err != nil {
		return nil, fmt.Errorf("read .dynsym of %s: %w", openPath, err)
	}
	return tlsVarIn(f, ds, openPath, NodeDiscoverySymbol)
}

// NodeLayout holds the V8 and addon layout constants of the walk, for
// 64-bit V8 without pointer compression or sandbox (Node's release builds).
type NodeLayout struct {
	// JSMapTable: offset of JSCollection::table (after map, properties, elements).
	JSMapTable uint64
	// WrappedObject: offset of embedder field 0 in an API object with
	// internal fields: the JSObject header (map, properties, elements),
	// then V8 13's CppHeap pointer slot, then the embedder fields.
	WrappedObject uint64
	// RecordSlot: where the embedder field leads. -1: it points at the
	// record itself (@datadog/pprof 5.20); >= 0: it points at a wrapper
	// holding the record pointer at that offset (the ObjectWrap-based
	// writers before it: sizeof(node::ObjectWrap) = 24).
	RecordSlot int64
}

// V8's public instance types (v8-internal.h, Internals): a value the writer
// stored is an API object, whose map's instance type (a uint16 at
// kMapInstanceTypeOffset) is kJSSpecialApiObjectType or within
// [kJSObjectType, kLastJSApiObjectType].
const (
	v8MapInstanceTypeOffset = 12
	v8JSSpecialAPIObject    = 0x410
	v8JSObject              = 0x421
	v8LastJSAPIObject       = 0x80a
)

func checkAPIObject(mem io.ReaderAt, obj uint64) error {
	m, err := readField(mem, obj, 0)
	if err != nil {
		return walkErr("value map", err)
	}
	if !isHeapObject(m) {
		return malformed("value map", "%#x is not a heap object", m)
	}
	var b [2]byte
	if _, err := mem.ReadAt(b[:], int64(m-heapObjectTag+v8MapInstanceTypeOffset)); err != nil {
		return walkErr("value map", err)
	}
	t := binary.LittleEndian.Uint16(b[:])
	if t != v8JSSpecialAPIObject && (t < v8JSObject || t > v8LastJSAPIObject) {
		return malformed("value map", "instance type %#x is not an API object", t)
	}
	return nil
}

// DefaultNodeLayout is the layout of Node 24 (V8 13.6) with @datadog/pprof
// 5.20 on x86-64 and arm64, the one tested (test/writers/ddnode).
func DefaultNodeLayout() NodeLayout {
	return NodeLayout{JSMapTable: 24, WrappedObject: 32, RecordSlot: -1}
}

// NodeWalkError says at which step a walk stopped; a walk that stops yields
// no context.
type NodeWalkError struct {
	Step string
	Err  error
}

func (e *NodeWalkError) Error() string { return "node context walk: " + e.Step + ": " + e.Err.Error() }
func (e *NodeWalkError) Unwrap() error { return e.Err }

// ErrNodeMalformed: a value on the chain is not of the shape the step
// expects (wrong tag, impossible size, pointer outside its range).
var ErrNodeMalformed = errors.New("malformed")

const (
	heapObjectTagMask = 3
	heapObjectTag     = 1
	maxOrderedBuckets = 1 << 16
	maxChainSteps     = 64
	orderedHashHeader = 3 // number of elements, deleted, buckets
	orderedEntrySize  = 3 // key, value, chain
	fixedArrayHeader  = 16
)

func walkErr(step string, err error) error { return &NodeWalkError{Step: step, Err: err} }

func malformed(step, format string, a ...any) error {
	return &NodeWalkError{Step: step, Err: fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrNodeMalformed)}
}

func isHeapObject(v uint64) bool { return v&heapObjectTagMask == heapObjectTag && v > 0x1000 }

// smi decodes a 64-bit V8 Smi (value in the upper 32 bits, lower zero).
func smi(v uint64) (int64, bool) {
	if v&0xffffffff != 0 {
		return 0, false
	}
	return int64(int32(v >> 32)), true
}

func readField(mem io.ReaderAt, obj, off uint64) (uint64, error) {
	return readU64(mem, obj-heapObjectTag+off)
}

// ReadNodeContext walks, for the thread whose discovery struct is at disc,
// the current AsyncContextFrame to the writer's entry and its record. ok is
// false when the thread is in no span (no frame, no entry, undefined); err
// names the step that failed otherwise.
func ReadNodeContext(mem io.ReaderAt, disc uint64, lay NodeLayout) (c Context, ok bool, err error) {
	var d [NodeDiscoverySize]byte
	if _, err := mem.ReadAt(d[:], int64(disc)); err != nil {
		return Context{}, false, walkErr("discovery", err)
	}
	cpedSlot := binary.LittleEndian.Uint64(d[0:])
	alsHandle := binary.LittleEndian.Uint64(d[8:])
	alsHash := int64(int32(binary.LittleEndian.Uint32(d[16:])))
	undef := binary.LittleEndian.Uint64(d[24:])
	if cpedSlot == 0 || alsHandle == 0 || undef == 0 {
		return Context{}, false, nil // writer not installed on this thread
	}
	frame, err := readU64(mem, cpedSlot)
	if err != nil {
		return Context{}, false, walkErr("cped", err)
	}
	if frame == undef || frame == 0 {
		return Context{}, false, nil
	}
	if !isHeapObject(frame) {
		return Context{}, false, malformed("frame", "%#x is not a heap object", frame)
	}
	als, err := readU64(mem, alsHandle)
	if err != nil {
		return Context{}, false, walkErr("als", err)
	}
	if !isHeapObject(als) {
		return Context{}, false, malformed("als", "%#x is not a heap object", als)
	}
	value, found, err := orderedHashLookup(mem, frame, als, alsHash, lay)
	if err != nil {
		return Context{}, false, err
	}
	if !found || value == undef {
		return Context{}, false, nil
	}
	if !isHeapObject(value) {
		return Context{}, false, malformed("value", "%#x is not a heap object", value)
	}
	if err := checkAPIObject(mem, value); err != nil {
		return Context{}, false, err
	}
	rec, err := readField(mem, value, lay.WrappedObject)
	if err != nil {
		return Context{}, false, walkErr("wrap", err)
	}
	if rec == 0 || rec&7 != 0 {
		return Context{}, false, malformed("wrap", "embedder field %#x is not an aligned pointer", rec)
	}
	if lay.RecordSlot >= 0 {
		if rec, err = readU64(mem, rec+uint64(lay.RecordSlot)); err != nil {
			return Context{}, false, walkErr("record", err)
		}
		if rec == 0 || rec&1 != 0 {
			return Context{}, false, malformed("record", "record pointer %#x", rec)
		}
	}
	c, err = readRecordAt(mem, rec)
	if err != nil {
		return Context{}, false, walkErr("record", err)
	}
	return c, true, nil
}

// orderedHashLookup finds key in the OrderedHashMap table of the JSMap map,
// looking only in the bucket of hash. Every size read is checked against the
// table's own length before any slot is read.
func orderedHashLookup(mem io.ReaderAt, jsmap, key uint64, hash int64, lay NodeLayout) (uint64, bool, error) {
	table, err := readField(mem, jsmap, lay.JSMapTable)
	if err != nil {
		return 0, false, walkErr("table", err)
	}
	if !isHeapObject(table) {
		return 0, false, malformed("table", "%#x is not a heap object", table)
	}
	var h [fixedArrayHeader + orderedHashHeader*8]byte
	if _, err := mem.ReadAt(h[:], int64(table-heapObjectTag)); err != nil {
		return 0, false, walkErr("table", err)
	}
	length, ok1 := smi(binary.LittleEndian.Uint64(h[8:]))
	nElems, ok2 := smi(binary.LittleEndian.Uint64(h[16:]))
	nDel, ok3 := smi(binary.LittleEndian.Uint64(h[24:]))
	nBuckets, ok4 := smi(binary.LittleEndian.Uint64(h[32:]))
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, false, malformed("table", "header is not Smis")
	}
	if nBuckets <= 0 || nBuckets > maxOrderedBuckets || nBuckets&(nBuckets-1) != 0 {
		return 0, false, malformed("table", "%d buckets", nBuckets)
	}
	capacity := 2 * nBuckets
	if length != orderedHashHeader+nBuckets+capacity*orderedEntrySize {
		return 0, false, malformed("table", "length %d for %d buckets", length, nBuckets)
	}
	if nElems < 0 || nDel < 0 || nElems+nDel > capacity {
		return 0, false, malformed("table", "%d elements, %d deleted, capacity %d", nElems, nDel, capacity)
	}
	slot := func(i int64) uint64 { return table - heapObjectTag + fixedArrayHeader + uint64(i)*8 }
	bucket := hash & (nBuckets - 1)
	raw, err := readU64(mem, slot(orderedHashHeader+bucket))
	if err != nil {
		return 0, false, walkErr("bucket", err)
	}
	entry, ok := smi(raw)
	if !ok {
		return 0, false, malformed("bucket", "bucket %d is not a Smi", bucket)
	}
	entriesStart := orderedHashHeader + nBuckets
	for step := 0; entry != -1; step++ {
		if step == maxChainSteps || entry < 0 || entry >= nElems+nDel {
			return 0, false, malformed("entry", "entry %d of %d (step %d)", entry, nElems+nDel, step)
		}
		var e [orderedEntrySize * 8]byte
		if _, err := mem.ReadAt(e[:], int64(slot(entriesStart+entry*orderedEntrySize))); err != nil {
			return 0, false, walkErr("entry", err)
		}
		if binary.LittleEndian.Uint64(e[0:]) == key {
			return binary.LittleEndian.Uint64(e[8:]), true, nil
		}
		if entry, ok = smi(binary.LittleEndian.Uint64(e[16:])); !ok {
			return 0, false, malformed("entry", "chain link is not a Smi")
		}
	}
	return 0, false, nil
}

// readRecordAt reads and decodes an OTEP 4947 record at ptr (header, then
// the attributes it announces, bounded).
func readRecordAt(mem io.ReaderAt, ptr uint64) (Context, error) {
	buf := make([]byte, RecordMaxSize)
	if _, err := mem.ReadAt(buf[:RecordHeaderSize], int64(ptr)); err != nil {
		return Context{}, fmt.Errorf("read record at %#x: %w", ptr, err)
	}
	n := int(binary.NativeEndian.Uint16(buf[26:28]))
	if n > RecordMaxAttrs {
		n = RecordMaxAttrs
	}
	if n > 0 {
		if _, err := mem.ReadAt(buf[RecordHeaderSize:RecordHeaderSize+n], int64(ptr)+RecordHeaderSize); err != nil {
			return Context{}, fmt.Errorf("read record attributes at %#x: %w", ptr, err)
		}
	}
	return ReadRecord(buf[:RecordHeaderSize+n])
}
