package kernels

import "runtime"

// arch is everything the matrix needs to know about one architecture: how
// to build the guest's programs, which Debian kernel package to boot, and
// how qemu boots it. An architecture is one entry of arches.
type arch struct {
	goarch   string // GOARCH of spanprof and the sink
	dpkgArch string // Debian architecture of the kernel package
	flavour  string // Debian kernel flavour: linux-image-VERSION-FLAVOUR-unsigned
	qemu     string // qemu system emulator
	// qemuArgs select the machine and CPU; TCG, because the matrix runs
	// where KVM is not usable.
	qemuArgs []string
	console  string // kernel console device
	// kernelArgs are added to the kernel command line.
	kernelArgs string
	// busybox is a static busybox for the architecture (busybox-static).
	busybox string
	// busyboxPkg, when set, is the Debian package busybox comes from for
	// a foreign architecture: downloaded to the cache and extracted.
	busyboxPkg string
	// libDirs maps where the host keeps the target's glibc (native or a
	// cross toolchain's) to where the guest's programs look for it.
	libDirs [][2]string
	// fixtureVars are extra make variables building the C fixtures for
	// this architecture, into fixtureOut under each testdata directory.
	fixtureVars []string
	fixtureOut  string
	// kernels names the Debian kernel series booted on this architecture.
	kernels []string
}

var arches = map[string]arch{
	"amd64": {
		goarch:   "amd64",
		dpkgArch: "amd64",
		flavour:  "cloud-amd64",
		qemu:     "qemu-system-x86_64",
		// One host thread runs both virtual CPUs (thread=single). With
		// a thread per CPU, a guest CPU went on running bytes of
		// __schedule that the kernel had patched (the sched_switch
		// tracepoint's static key, flipped as spanprof's off-CPU program
		// attaches): 6.1 hung in a soft lockup and 6.12 oopsed on a
		// stale int3, each time within 200 attaches (guest.sh patching),
		// where one thread ran 3,000 on each without fault. Real CPUs
		// and KVM honour the serializing IPIs the kernel sends.
		qemuArgs: []string{"-machine", "q35", "-accel", "tcg,thread=single"},
		console:  "ttyS0",
		// TCG's TSC is not marked stable, and without it the vDSO's
		// clock_gettime falls back to a system call, which no machine
		// with a stable TSC or kvm-clock does: the workload would then
		// run in code no fleet runs.
		kernelArgs: "clocksource=tsc tsc=reliable",
		busybox:    "/bin/busybox",
		libDirs: [][2]string{
			{"/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu"},
			{"/lib64", "/lib64"},
		},
		fixtureOut: "build",
		// 6.12+deb13 is Debian 13's build of 6.12, a different stable
		// release and configuration from Debian 12's backport. 5.10 is
		// the floor (Debian 11), run with the compat object; its guest
		// loses timer ticks only when the host is loaded beside it
		// (docs/kernels.md), and make test runs one package at a time.
		kernels: []string{"5.10", "6.1", "6.12", "6.12+deb13"},
	},
	"arm64": {
		goarch:   "arm64",
		dpkgArch: "arm64",
		flavour:  "cloud-arm64",
		qemu:     "qemu-system-aarch64",
		// -cpu max emulates pointer authentication with the
		// architected QARMA algorithm, which made the verifier's loads
		// take 490 s instead of 43 s under TCG: the implementation-defined
		// one is as good for the guest and cheap to emulate.
		// One host thread for both virtual CPUs here too: with a thread
		// per CPU, a sched_switch program attached after the kernel
		// patched its static key sometimes never ran (2 of 600 attaches,
		// guest.sh patching), the off-CPU step then recording no wait.
		qemuArgs:   []string{"-machine", "virt", "-cpu", "max,pauth-impdef=on", "-accel", "tcg,thread=single"},
		console:    "ttyAMA0",
		busyboxPkg: "busybox-static",
		// The cross toolchain's glibc (libc6-arm64-cross), where an
		// arm64 system keeps it: the loader at /lib, the rest in the
		// multiarch directory, which the loader searches without a cache.
		libDirs: [][2]string{
			{"/usr/aarch64-linux-gnu/lib", "/lib/aarch64-linux-gnu"},
			{"/usr/aarch64-linux-gnu/lib", "/lib"},
		},
		fixtureVars: []string{
			"GCC=aarch64-linux-gnu-gcc", "CC=aarch64-linux-gnu-gcc",
			"CLANG=clang-19 --target=aarch64-linux-gnu -fuse-ld=bfd",
			"GXX=aarch64-linux-gnu-g++", "CLANGXX=clang++-19 --target=aarch64-linux-gnu -fuse-ld=bfd",
			// The unwinding fixture signs its return addresses, as
			// distributions that build with -mbranch-protection=standard
			// do: its stacks hold pointer-authentication codes to strip.
			"ARCHFLAGS=-mbranch-protection=standard",
			"OUT=build-arm64",
		},
		fixtureOut: "build-arm64",
		// One arm64 kernel by default: a boot and run takes about 3
		// minutes under TCG, twice an x86 one. 6.1 is Debian 12's default
		// and lacks the VMA iterator, so its fallbacks run; 6.12 passes
		// too (SPANPROF_KERNELS=arm64/6.12), and its verifier's
		// differences are arch-neutral, judged by the x86 6.12 boot.
		kernels: []string{"6.1"},
	},
}

// hostArch is the architecture the host kernel runs spanprof natively.
func hostArch() string { return runtime.GOARCH }

// kernelSeries is one series of Debian kernels: how its package names
// look, FLAVOUR standing for the architecture's flavour, and the Debian
// suite that has it when the host's apt sources do not ("" for the host's
// own: Debian 12 and its backports).
type kernelSeries struct {
	pattern string
	suite   string
	// kernelArgs are added to the architecture's for this series.
	kernelArgs string
	// alone: no other guest runs beside this series' (TestKernelMatrix
	// runs guests side by side).
	alone bool
}

// series are the kernel series the matrix knows. The newest package apt
// knows is booted.
var series = map[string]kernelSeries{
	// 5.10 checks that the IO-APIC delivers the timer's interrupt within
	// a few ticks, which an emulated machine under load misses ("IO-APIC
	// + timer doesn't work!", a panic at boot); the check is skipped.
	// It boots alone: beside another guest it loses timer ticks, and with
	// them on-CPU samples (66-94 % of a fixture's CPU time against the
	// 90 % bar, docs/kernels.md), where the other series do not.
	"5.10":       {`^linux-image-5\.10\.0-[0-9]+-FLAVOUR-unsigned$`, "bullseye", "no_timer_check", true},
	"6.1":        {`^linux-image-6\.1\.0-[0-9]+-FLAVOUR-unsigned$`, "", "", false},
	"6.12":       {`^linux-image-6\.12\.[0-9]+\+deb12-FLAVOUR-unsigned$`, "", "", false},
	"6.12+deb13": {`^linux-image-6\.12\.[0-9]+\+deb13-FLAVOUR-unsigned$`, "trixie", "", false},
}
