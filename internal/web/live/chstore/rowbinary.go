package chstore

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
)

// RowBinary: little-endian fixed-size numbers, strings and arrays as a
// LEB128 length then the bytes or elements.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) i32(v int32)  { e.u32(uint32(v)) }
func (e *enc) i64(v int64)  { e.u64(uint64(v)) }
func (e *enc) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *enc) uvarint(n int) {
	e.b = binary.AppendUvarint(e.b, uint64(n))
}

// hex writes b as a string of lowercase hex digits, without the
// intermediate string hex.EncodeToString allocates.
func (e *enc) hex(b []byte) {
	e.uvarint(2 * len(b))
	e.b = hex.AppendEncode(e.b, b)
}
func (e *enc) str(s string) {
	e.uvarint(len(s))
	e.b = append(e.b, s...)
}

var errShort = errors.New("decode clickhouse rowbinary: truncated answer")

type dec struct {
	b   []byte
	err error
}

func (d *dec) more() bool { return d.err == nil && len(d.b) > 0 }

func (d *dec) take(n int) []byte {
	if d.err != nil || len(d.b) < n {
		d.err = errShort
		return make([]byte, n)
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}
func (d *dec) u8() uint8   { return d.take(1)[0] }
func (d *dec) u16() uint16 { return binary.LittleEndian.Uint16(d.take(2)) }
func (d *dec) u32() uint32 { return binary.LittleEndian.Uint32(d.take(4)) }
func (d *dec) u64() uint64 { return binary.LittleEndian.Uint64(d.take(8)) }
func (d *dec) i32() int32  { return int32(d.u32()) }
func (d *dec) i64() int64  { return int64(d.u64()) }
func (d *dec) uvarint() int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > math.MaxInt32 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}
func (d *dec) str() string { return string(d.take(d.uvarint())) }
func (d *dec) strs() []string {
	n := d.uvarint()
	out := make([]string, 0, min(n, 1<<16))
	for range n {
		out = append(out, d.str())
	}
	return out
}
