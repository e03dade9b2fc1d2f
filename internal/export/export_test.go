package export

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gpprof "github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/export/exporttest"
)

func TestFormatFor(t *testing.T) {
	tests := []struct {
		path    string
		want    string
		wantErr error
	}{
		{"out.otlp.json", FormatOTLPJSON, nil},
		{"/tmp/x/OUT.OTLP.PB", FormatOTLPProto, nil},
		{"cpu.pb.gz", FormatPprof, nil},
		{"a.b.folded", FormatFolded, nil},
		{"page.html", FormatHTML, nil},
		{"out.json", "", ErrUnknownFormat},
		{"out.pb", "", ErrUnknownFormat},
		{".folded", "", ErrUnknownFormat},
		{"dir.folded/", "", ErrUnknownFormat},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := FormatFor(tt.path)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("format = %q, want %q", got, tt.want)
			}
			if errors.Is(err, ErrUnknownFormat) && (!strings.Contains(err.Error(), "*.otlp.json, *.otlp.pb, *.pb.gz, *.folded, *.html") || strings.Contains(err.Error(), "\n")) {
				t.Errorf("error should list suffixes on one line: %v", err)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	tests := []struct {
		name  string
		check func(t *testing.T, data []byte)
	}{
		{"p.otlp.json", func(t *testing.T, data []byte) {
			pd, err := (&pprofile.JSONUnmarshaler{}).UnmarshalProfiles(data)
			if err != nil || pd.ResourceProfiles().Len() != 2 {
				t.Errorf("unmarshal: %v, %d resources", err, pd.ResourceProfiles().Len())
			}
		}},
		{"p.otlp.pb", func(t *testing.T, data []byte) {
			pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(data)
			if err != nil || pd.SampleCount() != 8 {
				t.Errorf("unmarshal: %v, %d samples", err, pd.SampleCount())
			}
		}},
		{"p.pb.gz", func(t *testing.T, data []byte) {
			prof, err := gpprof.ParseData(data)
			if err != nil || len(prof.Sample) != 8 {
				t.Errorf("parse: %v", err)
			}
		}},
		{"p.html", func(t *testing.T, data []byte) {
			if !bytes.HasPrefix(data, []byte("<!DOCTYPE html>")) || !bytes.Contains(data, []byte(`id="spanprof-data"`)) {
				t.Errorf("not a viewer page: %.200s", data)
			}
		}},
		{"p.folded", func(t *testing.T, data []byte) {
			if !bytes.HasPrefix(data, []byte("server;[off-cpu];main.main;")) {
				t.Errorf("unexpected folded output:\n%s", data)
			}
		}},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name)
			if err := WriteFile(path, exporttest.Small()); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, data)
		})
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(tests) {
		t.Errorf("directory holds %d files, want %d (temporary files left?)", len(entries), len(tests))
	}
}

func TestWriteFileFailures(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		path    string
		wantErr string
	}{
		{"unknown", filepath.Join(dir, "p.txt"), "unsupported output format"},
		{"missing directory", filepath.Join(dir, "nope", "p.folded"), "does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := WriteFile(tt.path, exporttest.Small())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed writes left %d files", len(entries))
	}
}

func TestWriteSummary(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSummary(&buf, exporttest.Small(), 3); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "top 3 functions by self on-CPU samples") {
		t.Errorf("unexpected summary:\n%s", buf.String())
	}
}

// TestCheckDestination: a destination that cannot be written is refused
// before recording, naming the user's path and the reason.
func TestCheckDestination(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string
	}{
		{filepath.Join(dir, "ok.folded"), ""},
		{"-", ""},
		{"/dev/null", ""},
		{dir, dir + " is a directory"},
		{filepath.Join(dir, "missing", "x.folded"), "directory " + filepath.Join(dir, "missing") + " does not exist"},
		{filepath.Join(file, "x.folded"), file + " is not a directory"},
	}
	for _, tt := range tests {
		err := CheckDestination(tt.path)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.path, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), ".tmp") {
			t.Errorf("%s: error %v, want %q", tt.path, err, tt.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the check left files behind: %v", entries)
	}
}

func TestResolveFormat(t *testing.T) {
	if f, err := ResolveFormat("-", FormatFolded); err != nil || f != FormatFolded {
		t.Errorf("- folded: %q %v", f, err)
	}
	if _, err := ResolveFormat("-", ""); err == nil || !strings.Contains(err.Error(), "needs --format") {
		t.Errorf("- without format: %v", err)
	}
	if _, err := ResolveFormat("x.folded", "svg"); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("svg: %v", err)
	}
	if f, err := ResolveFormat("/dev/stdout", FormatPprof); err != nil || f != FormatPprof {
		t.Errorf("/dev/stdout pprof: %q %v", f, err)
	}
}
