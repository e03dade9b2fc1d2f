package tracectx

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// Hand-built protobuf, so the decoder is checked against the schema.
func pbBytes(num protowire.Number, v []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func anyString(s string) []byte { return pbBytes(1, []byte(s)) }

func keyValue(k string, anyValue []byte) []byte {
	return append(pbBytes(1, []byte(k)), pbBytes(2, anyValue)...)
}

func processContextPayload() []byte {
	var res []byte
	res = append(res, pbBytes(1, keyValue("service.name", anyString("api")))...)
	res = append(res, pbBytes(1, keyValue("service.instance.id", anyString("i-1")))...)
	minusFive := int64(-5)
	intVal := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), uint64(minusFive))
	res = append(res, pbBytes(1, keyValue("answer", intVal))...)
	boolVal := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1)
	res = append(res, pbBytes(1, keyValue("flag", boolVal))...)
	dbl := protowire.AppendFixed64(protowire.AppendTag(nil, 4, protowire.Fixed64Type), math.Float64bits(1.5))
	res = append(res, pbBytes(1, keyValue("ratio", dbl))...)
	res = append(res, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 0)...) // dropped_attributes_count
	var out []byte
	out = append(out, pbBytes(1, res)...)
	out = append(out, pbBytes(2, keyValue(SchemaVersionKey, anyString("tlsdesc_v1_dev")))...)
	arr := append(pbBytes(1, anyString("http.route")), pbBytes(1, anyString("http.method"))...)
	out = append(out, pbBytes(2, keyValue(AttributeKeyMapKey, pbBytes(5, arr)))...)
	out = append(out, pbBytes(15, []byte("future field"))...)
	return out
}

func TestDecodeProcessContext(t *testing.T) {
	pc, err := DecodeProcessContext(processContextPayload())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"service.name": "api", "service.instance.id": "i-1", "answer": "-5", "flag": "true", "ratio": "1.5"}
	if len(pc.Resource) != len(want) {
		t.Errorf("resource %v, want %v", pc.Resource, want)
	}
	for k, v := range want {
		if pc.Resource[k] != v {
			t.Errorf("resource[%q] = %q, want %q", k, pc.Resource[k], v)
		}
	}
	if pc.Extra[SchemaVersionKey] != "tlsdesc_v1_dev" {
		t.Errorf("extra %v", pc.Extra)
	}
	if !slices.Equal(pc.AttributeKeyMap, []string{"http.route", "http.method"}) {
		t.Errorf("key map %v", pc.AttributeKeyMap)
	}
}

func TestDecodeProcessContextMalformed(t *testing.T) {
	good := processContextPayload()
	tests := []struct {
		name string
		in   []byte
	}{
		{"truncated", good[:len(good)-3]},
		{"length past end", []byte{0x0a, 0x10, 0x01}},
		{"bad tag", []byte{0x00}},
		{"truncated varint", []byte{0x08, 0xff}},
		{"bad resource attribute", pbBytes(1, pbBytes(1, []byte{0x0a, 0x05, 'a'}))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeProcessContext(tt.in); !errors.Is(err, ErrBadPayload) {
				t.Errorf("err %v, want ErrBadPayload", err)
			}
		})
	}
}

// fakeMem is process memory: regions at addresses; reads outside fail.
// onRead lets a test change memory between reads, like a publisher would.
type fakeMem struct {
	regions map[uint64][]byte
	reads   int
	onRead  func(m *fakeMem)
}

func (m *fakeMem) ReadAt(p []byte, off int64) (int, error) {
	m.reads++
	if m.onRead != nil {
		m.onRead(m)
	}
	for base, b := range m.regions {
		if uint64(off) >= base && uint64(off)+uint64(len(p)) <= base+uint64(len(b)) {
			return copy(p, b[uint64(off)-base:]), nil
		}
	}
	return 0, io.EOF
}

func header(version, size uint32, published, ptr uint64) []byte {
	h := make([]byte, 4096)
	copy(h, "OTEL_CTX")
	binary.NativeEndian.PutUint32(h[8:], version)
	binary.NativeEndian.PutUint32(h[12:], size)
	binary.NativeEndian.PutUint64(h[16:], published)
	binary.NativeEndian.PutUint64(h[24:], ptr)
	return h
}

func TestLoadProcessContext(t *testing.T) {
	const hdrAt, payloadAt = 0x7f0000000000, 0x5500000000
	payload := processContextPayload()
	// Version 1's payload: the Resource alone, as field 1 of the
	// ProcessContext holds it.
	resourcePayload := pbBytes(1, keyValue("service.name", anyString("api")))
	maps := []mapping{
		{start: 0x1000, end: 0x2000, path: "/usr/bin/x"},
		{start: hdrAt, end: hdrAt + 4096, path: "/memfd:OTEL_CTX (deleted)"},
	}
	tests := []struct {
		name    string
		hdr     []byte
		maps    []mapping
		onRead  func(m *fakeMem)
		wantErr error
	}{
		{name: "ok", hdr: header(2, uint32(len(payload)), 1234, payloadAt)},
		{name: "anon name", hdr: header(2, uint32(len(payload)), 1234, payloadAt),
			maps: []mapping{{start: hdrAt, end: hdrAt + 4096, path: "[anon:OTEL_CTX]"}}},
		{name: "no mapping", hdr: header(2, uint32(len(payload)), 1234, payloadAt),
			maps: maps[:1], wantErr: ErrNoProcessContext},
		{name: "version 1: a bare Resource", hdr: header(1, uint32(len(resourcePayload)), 1234, payloadAt+0x10000)},
		{name: "version 3", hdr: header(3, uint32(len(payload)), 1234, payloadAt), wantErr: ErrNoProcessContext},
		{name: "anon_shmem name", hdr: header(2, uint32(len(payload)), 1234, payloadAt),
			maps: []mapping{{start: hdrAt, end: hdrAt + 4096, path: "[anon_shmem:OTEL_CTX]"}}},
		{name: "bad signature", hdr: append([]byte("OTEL_CTY"), header(2, 1, 1, payloadAt)[8:]...), wantErr: ErrNoProcessContext},
		{name: "always updating", hdr: header(2, uint32(len(payload)), 0, payloadAt), wantErr: ErrProcessContextBusy},
		{name: "huge payload", hdr: header(2, MaxProcessContextPayload+1, 1, payloadAt), wantErr: ErrBadPayload},
		{
			name: "changes while read", hdr: header(2, uint32(len(payload)), 1, payloadAt),
			onRead: func(m *fakeMem) {
				binary.NativeEndian.PutUint64(m.regions[hdrAt][16:], uint64(m.reads))
			},
			wantErr: ErrProcessContextBusy,
		},
		{
			name: "settles after an update", hdr: header(2, uint32(len(payload)), 0, payloadAt),
			onRead: func(m *fakeMem) {
				if m.reads == 3 {
					binary.NativeEndian.PutUint64(m.regions[hdrAt][16:], 99)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := &fakeMem{regions: map[uint64][]byte{hdrAt: tt.hdr, payloadAt: payload, payloadAt + 0x10000: resourcePayload}, onRead: tt.onRead}
			m := maps
			if tt.maps != nil {
				m = tt.maps
			}
			pc, err := loadProcessContext(mem, m)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if err == nil && (pc.Resource["service.name"] != "api" || pc.Version != binary.NativeEndian.Uint32(tt.hdr[8:])) {
				t.Errorf("resource %v version %d", pc.Resource, pc.Version)
			}
		})
	}
}

// FuzzDecodeProcessContext: arbitrary bytes from another process never
// panic or hang the decoder.
func FuzzDecodeProcessContext(f *testing.F) {
	f.Add(processContextPayload())
	f.Add([]byte{0x0a, 0x10, 0x01})
	f.Add(pbBytes(1, pbBytes(1, keyValue("k", pbBytes(6, pbBytes(1, keyValue("n", anyString("v"))))))))
	f.Fuzz(func(t *testing.T, b []byte) {
		pc, err := DecodeProcessContext(b)
		if err == nil && (pc.Resource == nil || pc.Extra == nil) {
			t.Fatal("nil maps on success")
		}
	})
}
