package agent

import (
	"log/slog"
	"testing"

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
			tt.cfg.DWARFCacheDir = t.TempDir()
			s, err := newSymbolization(tt.cfg, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.mode != tt.wantMode || (s.debuginfod != nil) != tt.wantClient {
				t.Errorf("mode %v, debuginfod client %v; want %v, %v", s.mode, s.debuginfod != nil, tt.wantMode, tt.wantClient)
			}
		})
	}
}
