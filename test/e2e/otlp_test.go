package e2e

import (
	"testing"

	"github.com/spanprof/spanprof/test/truth"
)

// otlpSample is an OTLP sample resolved through the dictionary.
type otlpSample = truth.Sample

// readOTLP parses an OTLP/JSON file with the collector's unmarshaler.
func readOTLP(t *testing.T, path string) []otlpSample {
	t.Helper()
	s, err := truth.ReadOTLP(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
