package truth

import (
	"encoding/hex"
	"fmt"
)

// Attribute keys of the native workloads' thread-context records
// (testdata/tracectx/workload.c, wl_keys), in key-byte order.
var WorkloadAttrKeys = []string{"http.request.method", "http.route", "enduser.id"}

// SpanAttributes returns the attributes the native workload gives the span
// with the span id spanHex (workload.c, wl_attrs): method, route and user
// are functions of the span id's first four bytes.
func SpanAttributes(spanHex string) (map[string]string, error) {
	b, err := hex.DecodeString(spanHex)
	if err != nil || len(b) != 8 {
		return nil, fmt.Errorf("span id %q: want 16 hex digits", spanHex)
	}
	method := "GET"
	if b[0]&1 != 0 {
		method = "POST"
	}
	return map[string]string{
		"http.request.method": method,
		"http.route":          fmt.Sprintf("/items/%d", b[1]%16),
		"enduser.id":          fmt.Sprintf("u%02x%02x", b[2], b[3]),
	}, nil
}

// AttrCheck counts, over the events of linked samples, those carrying the
// workload's attributes: Present with all three keys, Right with the
// values of their span; Stray counts events without a link that carry any
// of the keys.
type AttrCheck struct {
	Linked, Present, Right, Stray int
}

// MeasureAttributes checks the thread-context attributes of samples
// against the values their span ids give.
func MeasureAttributes(samples []Sample) AttrCheck {
	var c AttrCheck
	for _, s := range samples {
		n := max(len(s.Values), 1) // an OTLP sample holds every event of its group
		if s.Trace == "" {
			for _, k := range WorkloadAttrKeys {
				if _, ok := s.Attrs[k]; ok {
					c.Stray += n
					break
				}
			}
			continue
		}
		c.Linked += n
		want, err := SpanAttributes(s.Span)
		if err != nil {
			continue
		}
		present, right := true, true
		for k, v := range want {
			got, ok := s.Attrs[k]
			present = present && ok
			right = right && ok && got == v
		}
		if present {
			c.Present += n
		}
		if right {
			c.Right += n
		}
	}
	return c
}
