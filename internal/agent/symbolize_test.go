package agent

import (
	"log/slog"
	"testing"

	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// TestSymbolizationDefault: with no mode configured the agent asks the
// debuginfod servers it is given (in its file or DEBUGINFOD_URLS), and
// an explicit local stays offline.
func TestSymbolizationDefault(t *testing.T) {
	tests := []struct {
		name       string
		env        string
		cfg        Symbolization
		wantMode   symbolize.Mode
		wantClient bool
	}{
		{"nothing set", "", Symbolization{}, symbolize.ModeLocal, false},
		{"DEBUGINFOD_URLS", "http://127.0.0.1:1", Symbolization{}, symbolize.ModeFull, true},
		{"configured URLs", "", Symbolization{DebuginfodURLs: []string{"http://127.0.0.1:1"}}, symbolize.ModeFull, true},
		{"local with DEBUGINFOD_URLS", "http://127.0.0.1:1", Symbolization{Mode: "local"}, symbolize.ModeLocal, false},
		{"none with DEBUGINFOD_URLS", "http://127.0.0.1:1", Symbolization{Mode: "none"}, symbolize.ModeNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DEBUGINFOD_URLS", tt.env)
			t.Setenv("XDG_CACHE_HOME", t.TempDir())
			pc, err := tt.cfg.pipeline()
			if err != nil {
				t.Fatal(err)
			}
			s, err := pipeline.NewSymbols(pc, pipeline.Budget{DWARFSpillDir: t.TempDir()}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if s.Mode != tt.wantMode || (s.Debuginfod != nil) != tt.wantClient {
				t.Errorf("mode %v, debuginfod client %v; want %v, %v", s.Mode, s.Debuginfod != nil, tt.wantMode, tt.wantClient)
			}
		})
	}
}
