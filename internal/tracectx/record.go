// Package tracectx finds and decodes the trace context that services publish
// for the profiler: the OTel thread context (OTEP 4947) a TLS pointer refers
// to, the uprobe hook spanprof_set_trace_context, and the OTel process
// context (OTEP 4719) that carries resource attributes.
//
// The eBPF side copies raw bytes at sample time; this package tells it where
// to read (Scan, Location) and turns the bytes back into values (ReadRecord).
package tracectx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Record layout of the OTel thread context, fixed by the SPEC.
const (
	// RecordHeaderSize is trace_id, span_id, valid, trace_flags and
	// attrs_data_size: what the eBPF program must copy at least.
	RecordHeaderSize = 28
	// RecordMaxSize bounds a record: header plus attributes.
	RecordMaxSize = 640
	// RecordMaxAttrs is the largest attrs_data_size a valid record has.
	RecordMaxAttrs = RecordMaxSize - RecordHeaderSize
)

// Errors of ReadRecord, for errors.Is.
var (
	// ErrShortRecord: fewer bytes than the header, or than attrs_data_size says.
	ErrShortRecord = errors.New("thread context record truncated")
	// ErrNotValid: the valid byte is not 1 (the writer is mid-update or the
	// pointer is stale).
	ErrNotValid = errors.New("thread context record not valid")
	// ErrNoTrace: the trace_id is all zeroes, which W3C defines as absent.
	ErrNoTrace = errors.New("thread context record has no trace id")
	// ErrBadAttrs: attrs_data_size exceeds 612 or an attribute runs past it.
	ErrBadAttrs = errors.New("thread context attributes malformed")
)

// Attr is one thread-context attribute. Key indexes the process context's
// threadlocal.attribute_key_map.
type Attr struct {
	Key   uint8
	Value string
}

// Context is a decoded thread-context record.
type Context struct {
	TraceID    [16]byte
	SpanID     [8]byte
	TraceFlags uint8
	Attrs      []Attr
}

// ReadRecord decodes a record copied from a thread's otel_thread_ctx_v1
// pointer. b may be longer than the record. A record whose attrs_data_size
// claims more bytes than the 612 allowed, or than b holds, is rejected rather
// than trusted: the bytes come from another process and may be torn or
// hostile.
func ReadRecord(b []byte) (Context, error) {
	var c Context
	if len(b) < RecordHeaderSize {
		return c, fmt.Errorf("read record: %d bytes: %w", len(b), ErrShortRecord)
	}
	if b[24] != 1 {
		return c, fmt.Errorf("read record: valid=%d: %w", b[24], ErrNotValid)
	}
	copy(c.TraceID[:], b[0:16])
	copy(c.SpanID[:], b[16:24])
	if c.TraceID == [16]byte{} {
		return c, fmt.Errorf("read record: %w", ErrNoTrace)
	}
	c.TraceFlags = b[25]
	size := int(binary.NativeEndian.Uint16(b[26:28]))
	if size > RecordMaxAttrs {
		return c, fmt.Errorf("read record: attrs_data_size %d > %d: %w", size, RecordMaxAttrs, ErrBadAttrs)
	}
	if len(b) < RecordHeaderSize+size {
		return c, fmt.Errorf("read record: attrs_data_size %d, have %d: %w", size, len(b)-RecordHeaderSize, ErrShortRecord)
	}
	attrs, err := ParseAttrs(b[RecordHeaderSize : RecordHeaderSize+size])
	if err != nil {
		return c, fmt.Errorf("read record: %w", err)
	}
	c.Attrs = attrs
	return c, nil
}

// ParseAttrs decodes a record's attributes, {key u8, len u8, value[len]}...,
// as many as b holds (attrs_data_size bytes, at most 612). An attribute
// running past the end is ErrBadAttrs, and none of b is returned then: a
// torn record says nothing reliable.
func ParseAttrs(b []byte) ([]Attr, error) {
	if len(b) > RecordMaxAttrs {
		return nil, fmt.Errorf("parse attributes: %d bytes > %d: %w", len(b), RecordMaxAttrs, ErrBadAttrs)
	}
	var out []Attr
	for at := 0; at < len(b); {
		if len(b)-at < 2 || len(b)-at < 2+int(b[at+1]) {
			return nil, fmt.Errorf("parse attributes: attribute at %d overruns attrs_data_size %d: %w", at, len(b), ErrBadAttrs)
		}
		n := int(b[at+1])
		out = append(out, Attr{Key: b[at], Value: string(b[at+2 : at+2+n])})
		at += 2 + n
	}
	return out, nil
}

// NamedAttr is a record attribute under its name from the process
// context's threadlocal.attribute_key_map.
type NamedAttr struct{ Key, Value string }

// ResolveAttrs decodes raw attributes (ParseAttrs) and names their keys
// with keyMap. For a key given twice the last entry wins, as a writer
// appends an update of a key it already set. Keys beyond keyMap cannot be
// named and are left out; unnamed counts them (all of them for a process
// without a key map). The result is sorted by name.
func ResolveAttrs(raw []byte, keyMap []string) (named []NamedAttr, unnamed int, err error) {
	attrs, err := ParseAttrs(raw)
	if err != nil {
		return nil, 0, err
	}
	var last [256]int16 // 1 + index into attrs of the key's last entry
	for i, a := range attrs {
		last[a.Key] = int16(i + 1)
	}
	for i, a := range attrs {
		if int(last[a.Key]) != i+1 {
			continue
		}
		if int(a.Key) >= len(keyMap) || keyMap[a.Key] == "" {
			unnamed++
			continue
		}
		named = append(named, NamedAttr{Key: keyMap[a.Key], Value: a.Value})
	}
	slices.SortStableFunc(named, func(x, y NamedAttr) int { return strings.Compare(x.Key, y.Key) })
	// Two key bytes the map gives one name: the later entry wins too.
	out := named[:0]
	for i, a := range named {
		if i+1 < len(named) && named[i+1].Key == a.Key {
			continue
		}
		out = append(out, a)
	}
	return out, unnamed, nil
}

// EncodeRecord is the inverse of ReadRecord, for tests and fakes that stand
// in for a C writer. It fails when the attributes exceed the 640-byte bound.
func EncodeRecord(c Context) ([]byte, error) {
	b := make([]byte, RecordHeaderSize, RecordMaxSize)
	copy(b[0:16], c.TraceID[:])
	copy(b[16:24], c.SpanID[:])
	b[24] = 1
	b[25] = c.TraceFlags
	for _, a := range c.Attrs {
		if len(a.Value) > 255 {
			return nil, fmt.Errorf("encode record: attribute %d value of %d bytes > 255", a.Key, len(a.Value))
		}
		b = append(b, a.Key, byte(len(a.Value)))
		b = append(b, a.Value...)
	}
	if len(b) > RecordMaxSize {
		return nil, fmt.Errorf("encode record: %d bytes > %d", len(b), RecordMaxSize)
	}
	binary.NativeEndian.PutUint16(b[26:28], uint16(len(b)-RecordHeaderSize))
	return b, nil
}
