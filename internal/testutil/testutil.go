// Package testutil holds what the tests of many packages share: the
// repository's root, the skips of tests that need root or a newer
// kernel, and the C fixtures of testdata/, built once per directory.
//
// Tests that need root, the kernel's eBPF support, a JVM or a network
// service skip with the reason, without root or under -short (make unit),
// and fail when the feature is there but does not work: a skip is for a
// missing feature, never for a swallowed error.
package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// RepoRoot returns the repository's top directory, found from this
// file's place in it, so that it is right whatever the test's working
// directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// IsRoot reports whether the test runs as root.
func IsRoot() bool { return os.Geteuid() == 0 }

// RequireRoot skips t unless it runs as root, with the reason why when
// given ("needs root to load eBPF programs" by default).
func RequireRoot(t testing.TB, why ...string) {
	t.Helper()
	if IsRoot() {
		return
	}
	reason := "needs root to load eBPF programs"
	if len(why) > 0 {
		reason = strings.Join(why, " ")
	}
	t.Skip(reason)
}

// RequireLong skips t under -short (make unit): what says what the test
// runs or needs that a quick run without root leaves out, for example "a
// JVM" or "builds the collector".
func RequireLong(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s", what)
	}
}

// KernelRelease returns the running kernel's major and minor version.
func KernelRelease() (major, minor int, err error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return 0, 0, fmt.Errorf("uname: %w", err)
	}
	return ParseRelease(unix.ByteSliceToString(u.Release[:]))
}

// ParseRelease reads the major and minor version of a kernel release
// string such as "6.1.0-31-cloud-amd64".
func ParseRelease(release string) (major, minor int, err error) {
	f := strings.SplitN(release, ".", 3)
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("kernel release %q: no major.minor", release)
	}
	major, err = strconv.Atoi(f[0])
	if err != nil {
		return 0, 0, fmt.Errorf("kernel release %q: %w", release, err)
	}
	digits := strings.IndexFunc(f[1], func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(f[1])
	}
	minor, err = strconv.Atoi(f[1][:digits])
	if err != nil {
		return 0, 0, fmt.Errorf("kernel release %q: %w", release, err)
	}
	return major, minor, nil
}

// SkipOnOldKernel skips t on a kernel older than major.minor; what names
// the feature the test needs of it (for example "the VMA iterator").
func SkipOnOldKernel(t testing.TB, major, minor int, what string) {
	t.Helper()
	ma, mi, err := KernelRelease()
	if err != nil {
		t.Fatal(err)
	}
	if ma < major || ma == major && mi < minor {
		t.Skipf("kernel %d.%d lacks %s (since %d.%d)", ma, mi, what, major, minor)
	}
}

// ReadBudget reads a file of "NAME NUMBER" lines (# starts a comment),
// such as bpf/verified-insns.txt.
func ReadBudget(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for i, l := range strings.Split(string(b), "\n") {
		if j := strings.IndexByte(l, '#'); j >= 0 {
			l = l[:j]
		}
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("%s:%d: want NAME NUMBER, got %q", path, i+1, l)
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		out[f[0]] = n
	}
	return out, nil
}
