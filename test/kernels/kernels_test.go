// Package kernels is the kernel-matrix test: it boots Debian's own kernels
// under qemu (TCG) with an initramfs holding spanprof and the fixtures, runs
// the same workload there as on the host kernel (guest.sh), and scores
// what spanprof wrote against the fixtures' ground truth.
//
// SPANPROF_KERNELS picks the kernels, comma-separated: a series (5.10,
// 6.1, 6.12, 6.12+deb13) for the host's architecture, ARCH/SERIES for another (arm64/6.12),
// and "host" for the running kernel without qemu. The default is every
// series of every architecture in arches, and the host.
// SPANPROF_KERNEL_TIMEOUT bounds one kernel's run (default 12m).
// SPANPROF_KERNEL_STEPS and SPANPROF_KERNEL_FLIP_RUNS reach guest.sh
// (guestEnv): the steps to run, and how many times the patching step's
// loop runs.
package kernels

import (
	"context"
	_ "embed"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

//go:embed guest.sh
var guestScript []byte

var repoRoot string

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	os.Exit(m.Run())
}

// target is one kernel of the matrix.
type target struct {
	name   string // as in SPANPROF_KERNELS
	arch   arch
	series string // "" for the host kernel
}

func targets(t *testing.T) []target {
	spec := os.Getenv("SPANPROF_KERNELS")
	var names []string
	if spec == "" {
		for _, an := range slices.Sorted(maps.Keys(arches)) {
			for _, s := range arches[an].kernels {
				names = append(names, an+"/"+s)
			}
		}
		names = append(names, "host")
	} else {
		names = strings.Split(spec, ",")
	}
	var out []target
	for _, n := range names {
		n = strings.TrimSpace(n)
		an, ser, found := strings.Cut(n, "/")
		if !found {
			an, ser = hostArch(), n
		}
		if n == "host" {
			an, ser = hostArch(), ""
		}
		a, ok := arches[an]
		if !ok {
			t.Fatalf("SPANPROF_KERNELS: no architecture %q (known: %v)", an, slices.Sorted(maps.Keys(arches)))
		}
		if _, ok := series[ser]; ser != "" && !ok {
			t.Fatalf("SPANPROF_KERNELS: no kernel series %q (known: %v)", ser, slices.Sorted(maps.Keys(series)))
		}
		out = append(out, target{n, a, ser})
	}
	return out
}

// TestKernelMatrix runs the workload on every kernel of the matrix and
// checks each one (check_test.go). Under TCG one kernel takes about a
// minute and a half; the figures of each go to the log in one line.
func TestKernelMatrix(t *testing.T) {
	testutil.RequireRoot(t, "needs root: the guest script loads eBPF programs on the host kernel, and apt-get downloads kernels")
	if testing.Short() {
		t.Skip("short mode: the kernel matrix boots kernels under qemu")
	}
	// The payloads outlive each kernel's subtest: every kernel of an
	// architecture boots the same one.
	payloadRoot := t.TempDir()
	payloads := map[string]string{}
	for _, tg := range targets(t) {
		t.Run(strings.ReplaceAll(tg.name, "/", "-"), func(t *testing.T) {
			dir, ok := payloads[tg.arch.goarch]
			if !ok {
				var err error
				if dir, err = buildPayload(payloadRoot, tg.arch); err != nil {
					t.Fatal(err)
				}
				payloads[tg.arch.goarch] = dir
			}
			runTarget(t, tg, dir)
		})
	}
}

func runTarget(t *testing.T, tg target, payloadDir string) {
	out := outDir(t, tg)
	timeout := 12 * time.Minute
	if v := os.Getenv("SPANPROF_KERNEL_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SPANPROF_KERNEL_TIMEOUT: %v", err)
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var c *console
	var err error
	started := time.Now()
	label := "host " + kernelRelease()
	if tg.series == "" {
		if tg.arch.goarch != runtime.GOARCH {
			t.Fatalf("host kernel runs %s programs, not %s", runtime.GOARCH, tg.arch.goarch)
		}
		c, err = runHost(ctx, payloadDir, out)
	} else {
		pkg, ap, perr := newestPackage(tg.arch, tg.series)
		if perr != nil {
			skipOrFail(t, perr)
		}
		deb, derr := download(ap, tg.arch, pkg)
		if derr != nil {
			skipOrFail(t, derr)
		}
		label = pkg
		kernel, kerr := extractKernel(deb, out)
		if kerr != nil {
			t.Fatal(kerr)
		}
		initrd := filepath.Join(out, "initrd.cpio")
		busybox, berr := busyboxFor(tg.arch)
		if berr != nil {
			t.Fatal(berr)
		}
		if err := writeInitramfs(tg.arch, initrd, busybox, payloadFiles(payloadDir)); err != nil {
			t.Fatalf("build initramfs: %v", err)
		}
		started = time.Now()
		c, err = boot(ctx, tg.arch, series[tg.series].kernelArgs, kernel, initrd, out)
	}
	elapsed := time.Since(started)
	if err != nil || c.result("done", "") == "" && c.results["done"] == nil {
		tail, _ := exec.Command("tail", "-n", "150", filepath.Join(out, "console.log")).Output()
		if err == nil {
			err = fmt.Errorf("the workload did not finish")
		}
		vcpus, _ := os.ReadFile(filepath.Join(out, "vcpus.txt"))
		if len(vcpus) > 0 {
			vcpus = append([]byte("\nthe guest's CPUs before the deadline (qemu):\n"), vcpus...)
		}
		t.Fatalf("%s: %v after %v; console tail:\n%s%s", label, err, elapsed.Round(time.Second), tail, vcpus)
	}
	check(t, label, c, elapsed)
}

// outDir is where a kernel's console and files go: a temporary directory,
// or under SPANPROF_KERNEL_KEEP when set, so a failure can be examined
// after the test.
func outDir(t *testing.T, tg target) string {
	keep := os.Getenv("SPANPROF_KERNEL_KEEP")
	if keep == "" {
		return t.TempDir()
	}
	dir := filepath.Join(keep, strings.ReplaceAll(tg.name, "/", "-"))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("output kept in %s", dir)
	return dir
}

func skipOrFail(t *testing.T, err error) {
	t.Helper()
	if isUnavailable(err) {
		t.Skipf("skipped: %v", err)
	}
	t.Fatal(err)
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}
