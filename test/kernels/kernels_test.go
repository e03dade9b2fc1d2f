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
// SPANPROF_KERNEL_PARALLEL is how many guests run at once (default: the
// host's CPUs).
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
	"strconv"
	"strings"
	"sync"
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
// checks each one (check_test.go). Under TCG one kernel takes two to four
// minutes; the figures of each go to the log in one line. Each guest
// keeps one host CPU busy (thread=single: one host thread runs both of
// its virtual CPUs), so guests boot side by side, as many at once as the
// host has CPUs (SPANPROF_KERNEL_PARALLEL sets another number; go test's
// -parallel, by default the host's CPUs too, also bounds them). Every
// kernel is downloaded and its initramfs written first, one at a time, so
// that no guest shares the host with that work. The host kernel's run has
// the machine to itself, before the guests; and so has 5.10's guest
// (kernelSeries.alone).
func TestKernelMatrix(t *testing.T) {
	testutil.RequireRoot(t, "needs root: the guest script loads eBPF programs on the host kernel, and apt-get downloads kernels")
	if testing.Short() {
		t.Skip("short mode: the kernel matrix boots kernels under qemu")
	}
	slots := runtime.NumCPU()
	if v := os.Getenv("SPANPROF_KERNEL_PARALLEL"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SPANPROF_KERNEL_PARALLEL=%q: want a number of guests ≥ 1", v)
		}
		slots = n
	}
	guests := make(chan struct{}, slots)
	// A series that boots alone holds the machine; the others share it.
	var machine sync.RWMutex
	// The payloads outlive each kernel's subtest: every kernel of an
	// architecture boots the same one.
	payloadRoot := t.TempDir()
	payloads := map[string]string{}
	var ready []prepared
	for _, tg := range targets(t) {
		p := prepared{target: tg}
		dir, ok := payloads[tg.arch.goarch]
		if !ok {
			var err error
			if dir, err = buildPayload(payloadRoot, tg.arch); err != nil {
				t.Fatal(err)
			}
			payloads[tg.arch.goarch] = dir
		}
		p.payload = dir
		if tg.series != "" {
			p.guest, p.err = prepareGuest(tg, dir, outDir(t, tg))
		}
		ready = append(ready, p)
	}
	for _, p := range ready {
		t.Run(strings.ReplaceAll(p.target.name, "/", "-"), func(t *testing.T) {
			if p.target.series == "" {
				runHostTarget(t, p.target, p.payload)
				return
			}
			if p.err != nil {
				skipOrFail(t, p.err)
			}
			t.Parallel()
			if series[p.target.series].alone {
				machine.Lock()
				defer machine.Unlock()
			} else {
				machine.RLock()
				defer machine.RUnlock()
				guests <- struct{}{}
				defer func() { <-guests }()
			}
			runGuest(t, p.target, p.guest)
		})
	}
}

// prepared is a target ready to run: its payload and, for a guest, its
// kernel and initramfs or why it has none.
type prepared struct {
	target  target
	payload string
	guest   guest
	err     error
}

// kernelTimeout bounds one kernel's run (SPANPROF_KERNEL_TIMEOUT).
func kernelTimeout(t *testing.T) time.Duration {
	timeout := 12 * time.Minute
	if v := os.Getenv("SPANPROF_KERNEL_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SPANPROF_KERNEL_TIMEOUT: %v", err)
		}
		timeout = d
	}
	return timeout
}

// runHostTarget runs the guest script on the running kernel and checks it.
func runHostTarget(t *testing.T, tg target, payloadDir string) {
	if tg.arch.goarch != runtime.GOARCH {
		t.Fatalf("host kernel runs %s programs, not %s", runtime.GOARCH, tg.arch.goarch)
	}
	out := outDir(t, tg)
	ctx, cancel := context.WithTimeout(context.Background(), kernelTimeout(t))
	defer cancel()
	started := time.Now()
	c, err := runHost(ctx, payloadDir, out)
	finish(t, "host "+kernelRelease(), out, c, err, time.Since(started))
}

// guest is a kernel ready to boot: its package, kernel image and initramfs.
type guest struct {
	label, kernel, initrd, out string
}

// prepareGuest downloads a target's kernel package (cached), extracts its
// kernel and writes its initramfs into out. An error that isUnavailable
// (no such package) skips the target.
func prepareGuest(tg target, payloadDir, out string) (guest, error) {
	pkg, ap, err := newestPackage(tg.arch, tg.series)
	if err != nil {
		return guest{}, err
	}
	deb, err := download(ap, tg.arch, pkg)
	if err != nil {
		return guest{}, err
	}
	kernel, err := extractKernel(deb, out)
	if err != nil {
		return guest{}, err
	}
	initrd := filepath.Join(out, "initrd.cpio")
	busybox, err := busyboxFor(tg.arch)
	if err != nil {
		return guest{}, err
	}
	if err := writeInitramfs(tg.arch, initrd, busybox, payloadFiles(payloadDir)); err != nil {
		return guest{}, fmt.Errorf("build initramfs: %w", err)
	}
	return guest{label: pkg, kernel: kernel, initrd: initrd, out: out}, nil
}

// runGuest boots a prepared kernel under qemu and checks its run.
func runGuest(t *testing.T, tg target, g guest) {
	ctx, cancel := context.WithTimeout(context.Background(), kernelTimeout(t))
	defer cancel()
	started := time.Now()
	c, err := boot(ctx, tg.arch, series[tg.series].kernelArgs, g.kernel, g.initrd, g.out)
	finish(t, g.label, g.out, c, err, time.Since(started))
}

// finish checks a kernel's run, or fails with the end of its console when
// it did not finish.
func finish(t *testing.T, label, out string, c *console, err error, elapsed time.Duration) {
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
