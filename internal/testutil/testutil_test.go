package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseRelease(t *testing.T) {
	for _, tc := range []struct {
		release      string
		major, minor int
		bad          bool
	}{
		{"6.1.0-31-cloud-amd64", 6, 1, false},
		{"6.18.2", 6, 18, false},
		{"5.15.0-rc1", 5, 15, false},
		{"6.12-foo", 6, 12, false},
		{"6", 0, 0, true},
		{"x.1", 0, 0, true},
		{"6.x", 0, 0, true},
	} {
		ma, mi, err := ParseRelease(tc.release)
		if (err != nil) != tc.bad || ma != tc.major || mi != tc.minor {
			t.Errorf("ParseRelease(%q) = %d, %d, %v; want %d, %d, error %v", tc.release, ma, mi, err, tc.major, tc.minor, tc.bad)
		}
	}
}

func TestRepoRoot(t *testing.T) {
	if _, err := os.Stat(filepath.Join(RepoRoot(), "go.mod")); err != nil {
		t.Fatalf("RepoRoot %s has no go.mod: %v", RepoRoot(), err)
	}
}
