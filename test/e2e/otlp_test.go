package e2e

import (
	"encoding/hex"
	"os"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// otlpSample is an OTLP sample resolved through the dictionary.
type otlpSample struct {
	pid    int64
	kind   string // sample type, e.g. "samples" or "off_cpu"
	frames []string
	attrs  map[string]string
	trace  string
	span   string
	times  []uint64
	values []int64
}

// readOTLP parses an OTLP/JSON file with the collector's unmarshaler.
func readOTLP(t *testing.T, path string) []otlpSample {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var u pprofile.JSONUnmarshaler
	pd, err := u.UnmarshalProfiles(b)
	if err != nil {
		t.Fatalf("pprofile.JSONUnmarshaler: %v", err)
	}
	d := pd.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	var out []otlpSample
	for _, rp := range pd.ResourceProfiles().All() {
		pidV, _ := rp.Resource().Attributes().Get("process.pid")
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				kind := str(prof.SampleType().TypeStrindex())
				for _, s := range prof.Samples().All() {
					os := otlpSample{pid: pidV.Int(), kind: kind, attrs: map[string]string{}}
					for _, li := range d.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
						loc := d.LocationTable().At(int(li))
						if loc.Lines().Len() == 0 {
							os.frames = append(os.frames, "")
						}
						for _, ln := range loc.Lines().All() {
							os.frames = append(os.frames, str(d.FunctionTable().At(int(ln.FunctionIndex())).NameStrindex()))
						}
					}
					for _, ai := range s.AttributeIndices().All() {
						kv := d.AttributeTable().At(int(ai))
						os.attrs[str(kv.KeyStrindex())] = kv.Value().AsString()
					}
					if li := s.LinkIndex(); li != 0 {
						l := d.LinkTable().At(int(li))
						tid, sid := l.TraceID(), l.SpanID()
						os.trace, os.span = hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:])
					}
					os.times = s.TimestampsUnixNano().AsRaw()
					os.values = s.Values().AsRaw()
					out = append(out, os)
				}
			}
		}
	}
	return out
}
