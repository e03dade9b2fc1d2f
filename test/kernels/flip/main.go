// Command flip attaches a program that does nothing to the sched_switch
// tracepoint and detaches it again, N times, and prints how long that took.
// The first attach and the last detach each flip the tracepoint's static
// key, which the kernel patches into its running text (text_poke_bp on
// x86: an int3 over the site, a serializing IPI to every CPU, the new
// bytes, another IPI). The kernel matrix runs it in each guest (guest.sh
// patching): an emulator that lets a virtual CPU run bytes the kernel has
// already patched hangs or oopses there within a few hundred flips, and
// would otherwise hang an off-CPU step at random.
//
// Usage: flip N
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

func main() {
	n, err := strconv.Atoi(os.Args[len(os.Args)-1])
	if len(os.Args) != 2 || err != nil || n <= 0 {
		fmt.Fprintln(os.Stderr, "usage: flip N (N attaches and detaches, N > 0)")
		os.Exit(2)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceRawTp,
		AttachTo:     "sched_switch",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "flip: load tp_btf/sched_switch program: %v\n", err)
		os.Exit(1)
	}
	defer prog.Close()
	start := time.Now()
	for i := 1; i <= n; i++ {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			fmt.Fprintf(os.Stderr, "flip: attach %d: %v\n", i, err)
			os.Exit(1)
		}
		time.Sleep(time.Millisecond)
		if err := l.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "flip: detach %d: %v\n", i, err)
			os.Exit(1)
		}
		time.Sleep(time.Millisecond)
		if i%100 == 0 {
			fmt.Printf("flip %d %.1fs\n", i, time.Since(start).Seconds())
		}
	}
	fmt.Printf("flips=%d s=%.1f\n", n, time.Since(start).Seconds())
}
