package kernels

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spanprof/spanprof/internal/testutil"
)

// fixtures are the C programs the workload runs, by testdata directory.
var fixtures = map[string][]string{
	"fixtures": {"chain-gcc", "chain-clang"},
	"tracectx": {"workload-gcc"},
	"offcpu":   {"spans"},
}

// amd64CtxFixtures are the dynamic-TLS correlation step's (guest.sh
// dtvcorrelation): TLSDESC libraries, built with -mtls-dialect=gnu2, which
// is x86-64's.
var amd64CtxFixtures = []string{"workload-dlopen", "libwlctx.so", "libtlsfill.so"}

// unwindFixtures are the unwind step's (guest.sh unwind): the hybrid
// unwinding fixture, built for arm64, whose unwinding the host's e2e test
// does not run; x86-64's is judged there (test/e2e/unwind_test.go).
var unwindFixtures = []string{"cases-gcc", "cases-clang"}

// buildPayload builds spanprof, the sink, flip and the Go service without cgo for
// the architecture, and the fixtures with its toolchain, into one directory
// under root with guest.sh.
func buildPayload(root string, a arch) (string, error) {
	dir := filepath.Join(root, "payload-"+a.goarch)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// The Go service is a module of its own (testdata/golabels/service).
	for name, pkg := range map[string][2]string{
		"spanprof":   {".", "./cmd/spanprof"},
		"sink":       {".", "./test/kernels/sink"},
		"flip":       {".", "./test/kernels/flip"},
		"insns":      {".", "./test/kernels/insns"},
		"go-service": {"testdata/golabels/service", "."},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg[1])
		cmd.Dir = filepath.Join(repoRoot, pkg[0])
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+a.goarch)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s for %s: %v\n%s", name, a.goarch, err, out)
		}
	}
	// The in-kernel tests of the BPF helpers (bpf/helpertest), run by
	// guest.sh's helpers step.
	cmd := exec.Command("go", "test", "-c", "-o", filepath.Join(dir, "helpertest"), "./bpf/helpertest")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+a.goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the helper tests for %s: %v\n%s", a.goarch, err, out)
	}
	all := maps.Clone(fixtures)
	if a.goarch == "amd64" {
		all["tracectx"] = append(slices.Clone(all["tracectx"]), amd64CtxFixtures...)
	}
	if a.goarch == "arm64" {
		all["unwind"] = unwindFixtures
	}
	for sub, names := range all {
		args := slices.Clone(a.fixtureVars)
		for _, n := range names {
			args = append(args, a.fixtureOut+"/"+n)
		}
		if _, err := testutil.BuildFixtures(sub, args...); err != nil {
			return "", fmt.Errorf("build %s fixtures for %s: %w", sub, a.goarch, err)
		}
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(repoRoot, "testdata", sub, a.fixtureOut, n))
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(dir, n), b, 0o755); err != nil {
				return "", err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "guest.sh"), guestScript, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "env"), guestEnv(), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// guestEnvVars are the host's settings guest.sh reads, by the variable it
// reads them as: SPANPROF_KERNEL_STEPS picks steps (a failure then names
// the others as not reported), SPANPROF_KERNEL_FLIP_RUNS repeats the
// patching step's loop.
var guestEnvVars = map[string]string{
	"SPANPROF_KERNEL_STEPS":     "STEPS",
	"SPANPROF_KERNEL_FLIP_RUNS": "FLIP_RUNS",
}

// guestEnv is the payload's env file, sourced by guest.sh: the settings
// reach a guest booted from an initramfs and the host run alike.
func guestEnv() []byte {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(guestEnvVars)) {
		if v := os.Getenv(k); v != "" {
			fmt.Fprintf(&b, "%s=%s\n", guestEnvVars[k], shellQuote(v))
		}
	}
	return []byte(b.String())
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// payloadFiles lists the payload directory.
func payloadFiles(dir string) payload {
	p := payload{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		p[e.Name()] = filepath.Join(dir, e.Name())
	}
	return p
}

func busyboxFor(a arch) (string, error) {
	if a.busyboxPkg != "" {
		return foreignBusybox(a)
	}
	if _, err := os.Stat(a.busybox); err != nil {
		return "", fmt.Errorf("no static busybox for %s at %s (Debian package busybox-static): %w", a.goarch, a.busybox, err)
	}
	return a.busybox, nil
}

func isUnavailable(err error) bool { return errors.Is(err, errUnavailable) }

// foreignBusybox extracts bin/busybox of the architecture's busybox-static
// package, downloaded to the kernel cache, next to the package.
func foreignBusybox(a arch) (string, error) {
	deb, err := download(apt{}, a, a.busyboxPkg)
	if err != nil {
		return "", err
	}
	dst := strings.TrimSuffix(deb, ".deb") + ".busybox"
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	dir, err := os.MkdirTemp(filepath.Dir(deb), "busybox-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if out, err := exec.Command("dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("extract %s: %v: %s", deb, err, out)
	}
	if err := os.Rename(filepath.Join(dir, "bin", "busybox"), dst); err != nil {
		return "", fmt.Errorf("no bin/busybox in %s: %w", deb, err)
	}
	return dst, nil
}
