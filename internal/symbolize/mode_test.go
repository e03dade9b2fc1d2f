package symbolize

import "testing"

func TestResolveMode(t *testing.T) {
	tests := []struct {
		flag       string
		debuginfod bool
		want       Mode
		wantErr    bool
	}{
		{"", false, ModeLocal, false},
		{"", true, ModeFull, false}, // DEBUGINFOD_URLS set: used, as elfutils and gdb do
		{"local", true, ModeLocal, false},
		{"none", true, ModeNone, false},
		{"full", false, ModeFull, false},
		{"debuginfod", true, 0, true},
	}
	for _, tt := range tests {
		got, err := ResolveMode(tt.flag, tt.debuginfod)
		if (err != nil) != tt.wantErr || (err == nil && got != tt.want) {
			t.Errorf("ResolveMode(%q, %v) = %v, %v; want %v (error %v)", tt.flag, tt.debuginfod, got, err, tt.want, tt.wantErr)
		}
	}
}
