package agent

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentCLIErrors: a bad configuration, or a machine where the agent
// cannot sample, ends `spanprof agent` with exit code 1 and one line.
func TestAgentCLIErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds spanprof")
	}
	bin := buildSpanprof(t, repoRoot(t))
	badFile := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(badFile, []byte("export:\n  compresion: gzip\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"off-cpu threshold", []string{"--off-cpu", "--off-cpu-threshold", "-1ms"}, nil, "spanprof agent: off-CPU threshold -1ms out of range 1ns..4.294967295s"},
		{"bad endpoint", []string{"--endpoint", "https://collector:4317"}, nil, "without a scheme"},
		{"bad env", nil, []string{"SPANPROF_REPORT_INTERVAL=soon"}, "SPANPROF_REPORT_INTERVAL: not a duration"},
		{"typo in file", []string{"--config", badFile}, nil, "field compresion not found"},
		{"bad flag", []string{"--frequncy", "9"}, nil, "flag provided but not defined: -frequncy (did you mean --frequency?)\nRun 'spanprof agent -h' for its flags."},
		{"duration without unit", []string{"--report-interval", "2"}, nil, `invalid value "2" for flag -report-interval: missing unit (2s?)`},
		{"env duration without unit", nil, []string{"SPANPROF_REPORT_INTERVAL=2"}, "missing unit (2s?)"},
	}
	if os.Geteuid() != 0 {
		tests = append(tests, struct {
			name string
			args []string
			env  []string
			want string
		}{"not root", []string{"--metrics-listen", "off"}, nil, "root"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"agent"}, tt.args...)...)
			cmd.Env = append(os.Environ(), tt.env...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want 1\n%s", err, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("output %q does not contain %q", out, tt.want)
			}
			// One line; a bad flag adds one naming -h, never the flag list.
			if lines := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; lines > 2 || lines == 2 && !strings.Contains(string(out), "\nRun 'spanprof agent -h'") {
				t.Errorf("error spans lines:\n%s", out)
			}
		})
	}
}
