// Package export writes a profile to a file whose format follows its name,
// and prints the text summary, so the CLI needs one call per output.
package export

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spanprof/spanprof/internal/export/flamegraph"
	"github.com/spanprof/spanprof/internal/export/folded"
	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/export/pprof"
	"github.com/spanprof/spanprof/internal/export/summary"
	"github.com/spanprof/spanprof/internal/profile"
)

// Format names returned by FormatFor.
const (
	FormatOTLPJSON  = "otlp-json"
	FormatOTLPProto = "otlp-proto"
	FormatPprof     = "pprof"
	FormatFolded    = "folded"
	FormatHTML      = "html"
)

// ErrUnknownFormat wraps every "unsupported output file name" error.
var ErrUnknownFormat = errors.New("unsupported output format")

// formats maps file suffixes to formats; the first match wins, so no
// suffix may end another listed before it.
var formats = []struct {
	suffix, format string
	write          func(io.Writer, *profile.Profile) error
}{
	{".otlp.json", FormatOTLPJSON, otlp.WriteJSON},
	{".otlp.pb", FormatOTLPProto, otlp.WriteProto},
	{".pb.gz", FormatPprof, pprof.Write},
	{".folded", FormatFolded, folded.Write},
	{".html", FormatHTML, flamegraph.Write},
}

// Suffixes lists the supported output file suffixes, for help texts.
func Suffixes() []string {
	s := make([]string, len(formats))
	for i, f := range formats {
		s[i] = f.suffix
	}
	return s
}

// FormatFor returns the format of an output file from its name (case
// insensitive), so the CLI can reject a bad --output before recording.
// The error is one line naming the supported suffixes.
func FormatFor(path string) (string, error) {
	i, err := lookup(path)
	if err != nil {
		return "", err
	}
	return formats[i].format, nil
}

func lookup(path string) (int, error) {
	name := strings.ToLower(filepath.Base(path))
	isDir := strings.HasSuffix(path, string(filepath.Separator))
	for i, f := range formats {
		if !isDir && strings.HasSuffix(name, f.suffix) && len(name) > len(f.suffix) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("output %q: %w: name it *%s", path, ErrUnknownFormat, strings.Join(Suffixes(), ", *"))
}

// WriteFile writes p to path in the format its name selects. It writes a
// temporary file in the same directory and renames it, so a failed export
// never leaves a truncated file behind.
func WriteFile(path string, p *profile.Profile) (err error) {
	if _, err := FormatFor(path); err != nil {
		return err
	}
	i, _ := lookup(path)
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("create output: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := formats[i].write(tmp, p); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// WriteSummary writes the text summary of p to w with the top functions
// (10 when top <= 0).
func WriteSummary(w io.Writer, p *profile.Profile, top int) error {
	return summary.Write(w, p, top)
}
