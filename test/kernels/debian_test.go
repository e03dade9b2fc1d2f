package kernels

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// errUnavailable marks a kernel the matrix cannot get: the test skips it
// with the reason, where every other failure fails.
var errUnavailable = errors.New("kernel package unavailable")

// cacheDir keeps downloaded kernel packages across runs, outside the
// repository.
func cacheDir() string {
	if d := os.Getenv("SPANPROF_KERNEL_CACHE"); d != "" {
		return d
	}
	return "/var/cache/spanprof-kernels"
}

// newestPackage returns the newest package of a series for an
// architecture, running apt-get update once when apt knows none, and the
// apt that knows it.
func newestPackage(a arch, ser string) (string, apt, error) {
	ks, ok := series[ser]
	if !ok {
		return "", apt{}, fmt.Errorf("unknown kernel series %q", ser)
	}
	ap, err := aptFor(ks.suite)
	if err != nil {
		return "", apt{}, err
	}
	pat := ks.pattern
	re := regexp.MustCompile(strings.ReplaceAll(pat, "FLAVOUR", regexp.QuoteMeta(a.flavour)))
	prefix := strings.SplitN(strings.TrimPrefix(pat, "^"), `\.`, 2)[0] // linux-image-6
	find := func() ([]string, error) {
		out, err := ap.command("apt-cache", "pkgnames", prefix).Output()
		if err != nil {
			return nil, fmt.Errorf("%w: apt-cache pkgnames: %v", errUnavailable, err)
		}
		var names []string
		for _, n := range strings.Fields(string(out)) {
			if re.MatchString(n) {
				names = append(names, n)
			}
		}
		return names, nil
	}
	names, err := find()
	if err == nil && len(names) == 0 {
		if out, err := ap.command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
			return "", apt{}, fmt.Errorf("%w: apt-get update: %v: %s", errUnavailable, err, out)
		}
		names, err = find()
	}
	if err != nil {
		return "", apt{}, err
	}
	if len(names) == 0 {
		return "", apt{}, fmt.Errorf("%w: apt knows no package matching %s", errUnavailable, re)
	}
	slices.SortFunc(names, func(x, y string) int { return slices.Compare(numbers(x), numbers(y)) })
	return names[len(names)-1], ap, nil
}

var digits = regexp.MustCompile(`[0-9]+`)

// numbers are the integers in a package name, in order: their order is the
// packages' version order within a series.
func numbers(s string) []int {
	var out []int
	for _, d := range digits.FindAllString(s, -1) {
		n, _ := strconv.Atoi(d)
		out = append(out, n)
	}
	return out
}

// download returns the cached .deb of pkg, fetching it with apt-get
// download when it is not there yet.
func download(ap apt, a arch, pkg string) (string, error) {
	dir := cacheDir()
	glob := func() string {
		m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*_"+a.dpkgArch+".deb"))
		if len(m) == 0 {
			return ""
		}
		slices.Sort(m)
		return m[len(m)-1]
	}
	if p := glob(); p != "" {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create cache %s: %w", dir, err)
	}
	cmd := ap.command("apt-get", "download", "-qq", pkg+":"+a.dpkgArch)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: apt-get download %s: %v: %s", errUnavailable, pkg, err, strings.TrimSpace(string(out)))
	}
	if p := glob(); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("apt-get download %s left no .deb in %s", pkg, dir)
}

// extractKernel writes the package's boot/vmlinuz-* to dir. The guest
// loads no modules: the serial console, BPF, BTF and tracefs are built
// into Debian's cloud kernels.
func extractKernel(deb, dir string) (string, error) {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("run dpkg-deb: %w", err)
	}
	defer cmd.Wait()
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", fmt.Errorf("no boot/vmlinuz-* in %s", deb)
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", deb, err)
		}
		if !strings.HasPrefix(strings.TrimPrefix(h.Name, "./"), "boot/vmlinuz-") || h.Typeflag != tar.TypeReg {
			continue
		}
		path := filepath.Join(dir, "vmlinuz")
		f, err := os.Create(path)
		if err != nil {
			return "", err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return "", fmt.Errorf("extract vmlinuz: %w", err)
		}
		io.Copy(io.Discard, out)
		return path, f.Close()
	}
}
