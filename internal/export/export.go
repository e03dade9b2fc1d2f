// Package export writes a profile to a file whose format follows its name,
// and prints the text summary, so the CLI needs one call per output.
package export

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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

// Formats lists the format names, for --format and help texts.
func Formats() []string {
	s := make([]string, len(formats))
	for i, f := range formats {
		s[i] = f.format
	}
	return s
}

// ResolveFormat returns the format of output path: format when given
// (one of Formats), else the one its name selects. Stdout ("-") needs a
// format, as it has no name to take one from.
func ResolveFormat(path, format string) (string, error) {
	if format != "" {
		if !slices.Contains(Formats(), format) {
			return "", fmt.Errorf("--format %q: %w: use %s", format, ErrUnknownFormat, strings.Join(Formats(), ", "))
		}
		return format, nil
	}
	if path == "-" {
		return "", fmt.Errorf("output to stdout needs --format (%s)", strings.Join(Formats(), ", "))
	}
	return FormatFor(path)
}

// CheckDestination reports, before anything is recorded, why path could
// not be written: a missing or unwritable directory, or a directory in
// the file's place. Stdout ("-") and existing devices or pipes are
// written in place and always pass.
func CheckDestination(path string) error {
	if path == "-" {
		return nil
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return fmt.Errorf("output %s is a directory: name a file in it", path)
		}
		if !st.Mode().IsRegular() {
			return nil
		}
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("output %s: directory %s does not exist", path, dir)
	}
	if err != nil {
		return fmt.Errorf("output %s: %w", path, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("output %s: %s is not a directory", path, dir)
	}
	// The file is written next to its destination and renamed: try that.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".check*")
	if err != nil {
		return fmt.Errorf("output %s: cannot write in %s: %w", path, dir, unwrapPath(err))
	}
	tmp.Close()
	os.Remove(tmp.Name())
	return nil
}

// unwrapPath drops the temporary file's name from an error, so the user
// reads only the paths they gave.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Write writes p to w in format (one of Formats).
func Write(w io.Writer, format string, p *profile.Profile) error {
	for _, f := range formats {
		if f.format == format {
			return f.write(w, p)
		}
	}
	return fmt.Errorf("write profile: %w %q", ErrUnknownFormat, format)
}

// WriteFile writes p to path in the format its name selects.
func WriteFile(path string, p *profile.Profile) error {
	format, err := FormatFor(path)
	if err != nil {
		return err
	}
	return WriteOutput(path, format, p)
}

// WriteOutput writes p to path in format. A regular file is written as a
// temporary file in the same directory and renamed, so a failed export
// never leaves a truncated file behind; a device or pipe (/dev/stdout) is
// written in place.
func WriteOutput(path, format string, p *profile.Profile) (err error) {
	if err := CheckDestination(path); err != nil {
		return err
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		out, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, unwrapPath(err))
		}
		if err := Write(out, format, p); err != nil {
			out.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		return out.Close()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := Write(tmp, format, p); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPath(err))
	}
	return nil
}

// WriteSummary writes the text summary of p to w with the top functions
// (10 when top <= 0).
func WriteSummary(w io.Writer, p *profile.Profile, top int) error {
	return summary.Write(w, p, top)
}
