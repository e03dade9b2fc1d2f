// Package truth scores what spanprof wrote against the ground truth the
// test workloads record (testdata/tracectx, testdata/offcpu), so the
// host end-to-end tests and the kernel-matrix test judge a run the same
// way.
package truth

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Sample is an OTLP sample resolved through the dictionary.
type Sample struct {
	PID    int64
	Kind   string // sample type, e.g. "samples" or "off_cpu"
	Frames []string
	Attrs  map[string]string
	Trace  string
	Span   string
	Times  []uint64
	Values []int64
}

// ReadOTLP parses an OTLP/JSON file with the collector's unmarshaler.
func ReadOTLP(path string) ([]Sample, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var u pprofile.JSONUnmarshaler
	pd, err := u.UnmarshalProfiles(b)
	if err != nil {
		return nil, fmt.Errorf("unmarshal %s: %w", path, err)
	}
	return Samples(pd), nil
}

// Samples resolves every sample of pd.
func Samples(pd pprofile.Profiles) []Sample {
	d := pd.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	var out []Sample
	for _, rp := range pd.ResourceProfiles().All() {
		pidV, _ := rp.Resource().Attributes().Get("process.pid")
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				kind := str(prof.SampleType().TypeStrindex())
				for _, s := range prof.Samples().All() {
					os := Sample{PID: pidV.Int(), Kind: kind, Attrs: map[string]string{}}
					for _, li := range d.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
						loc := d.LocationTable().At(int(li))
						if loc.Lines().Len() == 0 {
							os.Frames = append(os.Frames, "")
						}
						for _, ln := range loc.Lines().All() {
							os.Frames = append(os.Frames, str(d.FunctionTable().At(int(ln.FunctionIndex())).NameStrindex()))
						}
					}
					for _, ai := range s.AttributeIndices().All() {
						kv := d.AttributeTable().At(int(ai))
						os.Attrs[str(kv.KeyStrindex())] = kv.Value().AsString()
					}
					if li := s.LinkIndex(); li != 0 {
						l := d.LinkTable().At(int(li))
						tid, sid := l.TraceID(), l.SpanID()
						os.Trace, os.Span = hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:])
					}
					os.Times = s.TimestampsUnixNano().AsRaw()
					os.Values = s.Values().AsRaw()
					out = append(out, os)
				}
			}
		}
	}
	return out
}

// ContainsFrame reports whether fn is one of frames; Go names match by
// their package-qualified suffix.
func ContainsFrame(frames []string, fn string) bool {
	for _, f := range frames {
		if f == fn || strings.HasSuffix(f, "."+fn) {
			return true
		}
	}
	return false
}

// Pct is 100*a/b, 0 when b is 0.
func Pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// Pct64 is Pct for int64.
func Pct64(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
