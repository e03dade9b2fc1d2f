package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set by the release build:
// go build -ldflags "-X github.com/spanprof/spanprof/internal/cli.version=v1.2.3".
var version = ""

// Build describes the running binary.
type Build struct {
	Version   string // the release, the module version, or "devel"
	Revision  string // VCS commit, "" when unknown
	Modified  bool   // built from a tree with uncommitted changes
	GoVersion string
	CGO       bool
}

// Info reads the build from the linker flag and the Go build info, which
// `go build` in a checkout fills with the commit.
func Info() Build {
	b := Build{Version: version, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			case "CGO_ENABLED":
				b.CGO = s.Value == "1"
			}
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}

// String is the one line `spanprof version` prints.
func (b Build) String() string {
	s := "spanprof " + b.Version
	if b.Revision != "" {
		rev := b.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " (" + rev
		if b.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return fmt.Sprintf("%s %s %s/%s", s, b.GoVersion, runtime.GOOS, runtime.GOARCH)
}
