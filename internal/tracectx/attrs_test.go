package tracectx

import (
	"errors"
	"slices"
	"testing"
)

func TestResolveAttrs(t *testing.T) {
	keys := []string{"http.request.method", "http.route", "", "enduser.id", "http.route"}
	tests := []struct {
		name    string
		raw     []byte
		keys    []string
		want    []NamedAttr
		unnamed int
		err     error
	}{
		{name: "none", raw: nil, keys: keys},
		{name: "sorted by name", keys: keys,
			raw:  []byte("\x01\x02/a\x00\x03GET\x03\x02u1"),
			want: []NamedAttr{{"enduser.id", "u1"}, {"http.request.method", "GET"}, {"http.route", "/a"}}},
		{name: "last entry of a key wins", keys: keys,
			raw:  []byte("\x00\x03GET\x00\x04POST"),
			want: []NamedAttr{{"http.request.method", "POST"}}},
		{name: "two key bytes of one name: the later wins", keys: keys,
			raw:  []byte("\x04\x02/b\x01\x02/a"),
			want: []NamedAttr{{"http.route", "/a"}}},
		{name: "keys beyond the map, or named empty, are counted", keys: keys,
			raw:  []byte("\x09\x01x\x02\x01y\x00\x00"),
			want: []NamedAttr{{"http.request.method", ""}}, unnamed: 2},
		{name: "a key given twice beyond the map counts once", keys: keys,
			raw: []byte("\x09\x01x\x09\x01y"), unnamed: 1},
		{name: "no key map", raw: []byte("\x00\x01x\x01\x01y"), unnamed: 2},
		{name: "value past the end", keys: keys, raw: []byte("\x00\x05GET"), err: ErrBadAttrs},
		{name: "lone key byte", keys: keys, raw: []byte("\x00\x01x\x01"), err: ErrBadAttrs},
		{name: "more than a record holds", keys: keys, raw: make([]byte, RecordMaxAttrs+1), err: ErrBadAttrs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, unnamed, err := ResolveAttrs(tt.raw, tt.keys)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if !slices.Equal(got, tt.want) || unnamed != tt.unnamed {
				t.Errorf("got %v unnamed %d, want %v unnamed %d", got, unnamed, tt.want, tt.unnamed)
			}
		})
	}
}

func TestKeyMapSchemaVersion(t *testing.T) {
	keys := []string{"a", "b"}
	for _, tt := range []struct {
		name    string
		extra   map[string]string
		want    []string
		wantErr bool
	}{
		{name: "merged name", extra: map[string]string{SchemaVersionKey: "tls_v1"}, want: keys},
		{name: "draft name", extra: map[string]string{SchemaVersionKey: "tlsdesc_v1_dev"}, want: keys},
		{name: "go labels", extra: map[string]string{SchemaVersionKey: "go_pprof_labels_v1"}, want: nil},
		{name: "no version", extra: map[string]string{}, want: keys},
		{name: "unknown version", extra: map[string]string{SchemaVersionKey: "v9"}, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pc := &ProcessContext{Extra: tt.extra, AttributeKeyMap: keys}
			got, err := pc.KeyMap()
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Errorf("KeyMap() = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// FuzzParseAttrs: the attributes come from another process's memory, as
// the kernel copied them: the parser must never panic, never return an
// attribute that is not wholly inside the bytes, and give back exactly
// the bytes it was given when it accepts them.
func FuzzParseAttrs(f *testing.F) {
	f.Add([]byte("\x00\x03GET\x01\x08/items/3\x02\x05u0a1b"))
	f.Add([]byte("\x00\x05GET"))
	f.Add([]byte{0xff, 0xff})
	f.Add(make([]byte, RecordMaxAttrs))
	f.Fuzz(func(t *testing.T, b []byte) {
		attrs, err := ParseAttrs(b)
		if err != nil {
			if !errors.Is(err, ErrBadAttrs) || attrs != nil {
				t.Fatalf("error %v with attributes %v", err, attrs)
			}
			return
		}
		var again []byte
		for _, a := range attrs {
			again = append(again, a.Key, byte(len(a.Value)))
			again = append(again, a.Value...)
		}
		if string(again) != string(b) {
			t.Fatalf("attributes %q re-encode to %x, were %x", attrs, again, b)
		}
		named, _, err := ResolveAttrs(b, []string{"a", "b", "c"})
		if err != nil || len(named) > 3 {
			t.Fatalf("ResolveAttrs of accepted bytes: %v, %v", named, err)
		}
	})
}
