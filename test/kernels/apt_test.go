package kernels

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostSources is the host's Debian apt source in deb822 form, from which
// a source for another suite is derived: the same mirror and keyring.
const hostSources = "/etc/apt/sources.list.d/debian.sources"

// apt runs apt-get and apt-cache either on the host's own state (suite
// "") or on a state directory of its own under the cache, whose only
// source is the host's Debian mirror with another suite: the host's
// package lists are neither read nor changed for it.
type apt struct {
	suite string
	opts  []string
}

func aptFor(suite string) (apt, error) {
	if suite == "" {
		return apt{}, nil
	}
	dir := filepath.Join(cacheDir(), "apt-"+suite)
	stanza, err := suiteSource(hostSources, suite)
	if err != nil {
		return apt{}, err
	}
	for _, d := range []string{"sources", "lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return apt{}, fmt.Errorf("create apt state %s: %w", dir, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "sources", "debian.sources"), stanza, 0o644); err != nil {
		return apt{}, err
	}
	status := filepath.Join(dir, "status")
	if _, err := os.Stat(status); err != nil {
		if err := os.WriteFile(status, nil, 0o644); err != nil {
			return apt{}, err
		}
	}
	return apt{suite: suite, opts: []string{
		"-o", "Dir::Etc::SourceList=/dev/null",
		"-o", "Dir::Etc::SourceParts=" + filepath.Join(dir, "sources"),
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"),
		"-o", "Dir::State::status=" + status,
		"-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
		// Package lists only: the host's configuration may ask for
		// translations and metadata the matrix does not read.
		"-o", "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false",
		"-o", "Acquire::Languages=none",
	}}, nil
}

func (a apt) command(name string, args ...string) *exec.Cmd {
	return exec.Command(name, append(append([]string{}, a.opts...), args...)...)
}

// suiteSource derives a deb822 stanza for suite from the host's: the
// first stanza of the main archive (a suite without a "-security" or
// "-updates" style suffix), with its URIs, components and Signed-By, and
// suite in place of its suites.
func suiteSource(path, suite string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: derive a %s source: %v", errUnavailable, suite, err)
	}
	for _, st := range bytes.Split(b, []byte("\n\n")) {
		f := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(st))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if ok {
				f[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		suites := strings.Fields(f["Suites"])
		if f["URIs"] == "" || len(suites) == 0 || strings.Contains(suites[0], "-") || !strings.Contains(" "+f["Types"]+" ", " deb ") {
			continue
		}
		var out strings.Builder
		fmt.Fprintf(&out, "Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\n", f["URIs"], suite, f["Components"])
		if k := f["Signed-By"]; k != "" {
			fmt.Fprintf(&out, "Signed-By: %s\n", k)
		}
		return []byte(out.String()), nil
	}
	return nil, fmt.Errorf("%w: %s has no stanza of the main Debian archive to derive a %s source from", errUnavailable, path, suite)
}

// TestSuiteSource derives another suite's source from deb822 files as
// Debian writes them: the main archive's stanza, whatever comes before
// it, and no stanza to derive from.
func TestSuiteSource(t *testing.T) {
	const main = "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
	const security = "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\nSigned-By: /k.gpg\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"main first", main + "\n" + security, "Types: deb\nURIs: http://mirror.example/debian\nSuites: bullseye\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"},
		{"security first", security + "\n" + main, "Types: deb\nURIs: http://mirror.example/debian\nSuites: bullseye\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"},
		{"security only", security, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "debian.sources")
			if err := os.WriteFile(p, []byte(tc.in), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := suiteSource(p, "bullseye")
			if tc.want == "" {
				if !isUnavailable(err) {
					t.Fatalf("got %q, %v; want the kernel unavailable", got, err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
