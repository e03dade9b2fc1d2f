package agent

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReliabilityBadConfigFiles: whatever is in the configuration file,
// the agent answers with one clear line that names the problem (and the
// file when it cannot read it), never a panic, a multi-line dump or a
// silent fallback to defaults.
func TestReliabilityBadConfigFiles(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string // written to the file unless path is set
		path    string
		want    string
	}{
		{"missing file", "", filepath.Join(dir, "nope.yaml"), "read config: open " + filepath.Join(dir, "nope.yaml") + ": no such file or directory"},
		{"directory", "", dir, "read config: read " + dir + ": is a directory"},
		{"not yaml", "export: [endpoints: {\n", "", "parse config: yaml: line"},
		{"tab indent", "export:\n\tendpoints: [a:1]\n", "", "parse config: yaml: line 2: found character that cannot start any token"},
		{"binary garbage", "\x7fELF\x02\x01\x01\x00\x00\xff\xfe", "", "parse config:"},
		{"unknown key", "frequncy: 99\n", "", "field frequncy not found"},
		{"nested unknown key", "export:\n  retry:\n    max_elapsd: 1m\n", "", "field max_elapsd not found"},
		{"wrong type", "frequency: fast\n", "", "cannot unmarshal !!str `fast` into int"},
		{"list for scalar", "frequency: [1, 2]\n", "", "cannot unmarshal !!seq into int"},
		{"bad duration", "export:\n  report_interval: 10 parsecs\n", "", "parse config:"},
		{"negative duration", "export:\n  timeout: -1s\n", "", "timeout must be positive, got -1s"},
		{"zero frequency", "frequency: 0\n", "", "frequency 0 out of range 1..100000"},
		{"huge frequency", "frequency: 99999999999999999999\n", "", "parse config:"},
		{"endpoint with scheme", "export:\n  endpoints: [\"http://c:4317\"]\n", "", "want HOST:PORT without a scheme"},
		{"no endpoint", "export:\n  endpoints: []\n", "", "export: no endpoint"},
		{"bad pid", "processes:\n  pids: [-4]\n", "", "processes: not a process id: -4"},
		{"path as executable", "processes:\n  executables: [/usr/bin/x]\n", "", "want a base name"},
		{"bad log level", "log_level: loud\n", "", "log level \"loud\": want debug, info, warn or error"},
		{"two documents, second bad", "frequency: 9\n---\nfrequncy: 9\n", "", ""}, // only the first document is read
		{"anchors and aliases", "a: &x [1]\nfrequency: *x\n", "", "parse config:"},
		{"missing CA file", "export:\n  tls:\n    ca_file: /nonexistent/ca.pem\n", "", "tls: /nonexistent/ca.pem"},
		{"queue size zero", "export:\n  queue_size: 0\n", "", "queue size must be at least 1, got 0"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = filepath.Join(dir, "c"+string(rune('a'+i))+".yaml")
				if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ParseArgs([]string{"--config", path}, func(string) (string, bool) { return "", false }, io.Discard)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.content)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not contain %q", msg, tt.want)
			}
			if len(msg) > 300 {
				t.Errorf("error of %d bytes is not one clear line: %q", len(msg), msg)
			}
		})
	}
}
