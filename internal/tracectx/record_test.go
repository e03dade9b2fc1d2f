package tracectx

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

// rawRecord builds record bytes by hand, independent of EncodeRecord, so the
// decoder is checked against the layout, not against itself.
func rawRecord(valid byte, flags byte, attrsSize uint16, attrs []byte) []byte {
	b := make([]byte, RecordHeaderSize, RecordHeaderSize+len(attrs))
	for i := range 16 {
		b[i] = byte(0x10 + i)
	}
	for i := range 8 {
		b[16+i] = byte(0xa0 + i)
	}
	b[24], b[25] = valid, flags
	binary.LittleEndian.PutUint16(b[26:], attrsSize)
	return append(b, attrs...)
}

func TestReadRecord(t *testing.T) {
	full := make([]byte, 0, RecordMaxAttrs)
	for len(full)+2+200 <= RecordMaxAttrs {
		full = append(full, 7, 200)
		full = append(full, make([]byte, 200)...)
	}
	full = append(full, 9, byte(RecordMaxAttrs-len(full)-2))
	full = append(full, make([]byte, RecordMaxAttrs-len(full))...)
	tests := []struct {
		name      string
		in        []byte
		wantErr   error
		wantAttrs []Attr
		wantFlags uint8
	}{
		{name: "no attributes", in: rawRecord(1, 1, 0, nil), wantFlags: 1},
		{name: "trailing bytes ignored", in: rawRecord(1, 0, 0, []byte{1, 2, 3})},
		{
			name: "two attributes", in: rawRecord(1, 1, 11, []byte{0, 3, 'G', 'E', 'T', 1, 4, '/', 'a', 'p', 'i'}),
			wantFlags: 1, wantAttrs: []Attr{{0, "GET"}, {1, "/api"}},
		},
		{name: "empty value", in: rawRecord(1, 0, 2, []byte{5, 0}), wantAttrs: []Attr{{5, ""}}},
		{name: "exactly 640 bytes", in: rawRecord(1, 0, RecordMaxAttrs, full)},
		{name: "short header", in: rawRecord(1, 0, 0, nil)[:27], wantErr: ErrShortRecord},
		{name: "empty", in: nil, wantErr: ErrShortRecord},
		{name: "not valid", in: rawRecord(0, 0, 0, nil), wantErr: ErrNotValid},
		{name: "valid 2 is not valid", in: rawRecord(2, 0, 0, nil), wantErr: ErrNotValid},
		{name: "lying size beyond 612", in: rawRecord(1, 0, 613, make([]byte, 700)), wantErr: ErrBadAttrs},
		{name: "lying size 0xffff", in: rawRecord(1, 0, 0xffff, nil), wantErr: ErrBadAttrs},
		{name: "size beyond the bytes copied", in: rawRecord(1, 0, 10, []byte{0, 3, 'a', 'b', 'c'}), wantErr: ErrShortRecord},
		{name: "attribute overruns size", in: rawRecord(1, 0, 4, []byte{0, 3, 'a', 'b', 'c'}), wantErr: ErrBadAttrs},
		{name: "lone key byte", in: rawRecord(1, 0, 1, []byte{0}), wantErr: ErrBadAttrs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ReadRecord(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				return
			}
			if c.TraceID[0] != 0x10 || c.TraceID[15] != 0x1f || c.SpanID[0] != 0xa0 || c.SpanID[7] != 0xa7 {
				t.Errorf("ids %x %x", c.TraceID, c.SpanID)
			}
			if c.TraceFlags != tt.wantFlags {
				t.Errorf("flags %d, want %d", c.TraceFlags, tt.wantFlags)
			}
			if tt.name == "exactly 640 bytes" {
				if n := len(c.Attrs); n != 4 || c.Attrs[3].Key != 9 || len(c.Attrs[3].Value) != 4 {
					t.Errorf("attrs %d, last %+v", n, c.Attrs[n-1])
				}
				return
			}
			if !slices.Equal(c.Attrs, tt.wantAttrs) {
				t.Errorf("attrs %+v, want %+v", c.Attrs, tt.wantAttrs)
			}
		})
	}
}

func TestReadRecordZeroTrace(t *testing.T) {
	b := rawRecord(1, 0, 0, nil)
	clear(b[:16])
	if _, err := ReadRecord(b); !errors.Is(err, ErrNoTrace) {
		t.Fatalf("err %v, want ErrNoTrace", err)
	}
}

func TestEncodeRecord(t *testing.T) {
	c := Context{TraceID: [16]byte{1}, SpanID: [8]byte{2}, TraceFlags: 1, Attrs: []Attr{{3, "x"}}}
	b, err := EncodeRecord(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != RecordHeaderSize+3 {
		t.Fatalf("len %d", len(b))
	}
	got, err := ReadRecord(b)
	if err != nil || got.TraceID != c.TraceID || got.SpanID != c.SpanID || !slices.Equal(got.Attrs, c.Attrs) {
		t.Errorf("round trip %+v %v", got, err)
	}
	big := Context{TraceID: [16]byte{1}, Attrs: []Attr{{0, string(make([]byte, 255))}, {1, string(make([]byte, 255))}, {2, string(make([]byte, 255))}}}
	if _, err := EncodeRecord(big); err == nil {
		t.Error("encoded a record over 640 bytes")
	}
}

// FuzzReadRecord: never panics, and whatever it accepts respects the bounds
// and survives a round trip.
func FuzzReadRecord(f *testing.F) {
	f.Add(rawRecord(1, 1, 0, nil))
	f.Add(rawRecord(1, 1, 11, []byte{0, 3, 'G', 'E', 'T', 1, 4, '/', 'a', 'p', 'i'}))
	f.Add(rawRecord(1, 0, 0xffff, nil))
	f.Add(rawRecord(1, 0, 4, []byte{0, 3, 'a', 'b', 'c'}))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ReadRecord(b)
		if err != nil {
			return
		}
		n := 0
		for _, a := range c.Attrs {
			n += 2 + len(a.Value)
		}
		if n > RecordMaxAttrs || int(binary.NativeEndian.Uint16(b[26:28])) != n {
			t.Fatalf("accepted %d attribute bytes, header says %d", n, binary.NativeEndian.Uint16(b[26:28]))
		}
		again, err := EncodeRecord(c)
		if err != nil {
			t.Fatalf("re-encode accepted record: %v", err)
		}
		if string(again[:25]) != string(b[:25]) || string(again[26:]) != string(b[26:RecordHeaderSize+n]) {
			t.Fatalf("round trip changed the record")
		}
	})
}
