package profile

import (
	"encoding/binary"
	"strings"
)

// Attrs are the attributes a sample's thread context carried (the
// OTEP 4947 record's, named through the process context's key map),
// sorted by key and encoded into one comparable string, so that they can
// be part of a GroupKey: samples with different attributes are never
// merged. The zero Attrs has none.
type Attrs string

// Attr is one key and value of Attrs.
type Attr struct{ Key, Value string }

// MakeAttrs encodes kv, which must be sorted by key with every key once.
func MakeAttrs(kv []Attr) Attrs {
	if len(kv) == 0 {
		return ""
	}
	var b strings.Builder
	var n [binary.MaxVarintLen64]byte
	for _, a := range kv {
		b.Write(n[:binary.PutUvarint(n[:], uint64(len(a.Key)))])
		b.WriteString(a.Key)
		b.Write(n[:binary.PutUvarint(n[:], uint64(len(a.Value)))])
		b.WriteString(a.Value)
	}
	return Attrs(b.String())
}

// All returns the attributes in key order.
func (a Attrs) All() []Attr {
	var out []Attr
	s := string(a)
	next := func() (string, bool) {
		l, n := binary.Uvarint([]byte(s[:min(len(s), binary.MaxVarintLen64)]))
		if n <= 0 || uint64(len(s)-n) < l {
			return "", false
		}
		v := s[n : n+int(l)]
		s = s[n+int(l):]
		return v, true
	}
	for len(s) > 0 {
		k, ok := next()
		if !ok {
			break
		}
		v, ok := next()
		if !ok {
			break
		}
		out = append(out, Attr{Key: k, Value: v})
	}
	return out
}
