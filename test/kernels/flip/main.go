// Command flip attaches a program that only counts its runs to the
// sched_switch tracepoint and detaches it again, N times, and prints how
// long that took and how many attaches the program never ran in (silent):
// each waits up to a second for a run.
// The first attach and the last detach each flip the tracepoint's static
// key, which the kernel patches into its running text (text_poke_bp on
// x86: an int3 over the site, a serializing IPI to every CPU, the new
// bytes, another IPI). The kernel matrix runs it in each guest (guest.sh
// patching): an emulator that lets a virtual CPU run bytes the kernel has
// already patched hangs or oopses there within a few hundred flips, and
// would otherwise hang an off-CPU step at random. One that goes on
// running the bytes from before the patch instead skips the program: the
// attach succeeds and nothing is ever recorded, which is what the silent
// count catches.
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
	runs, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		fmt.Fprintf(os.Stderr, "flip: create the run counter: %v\n", err)
		os.Exit(1)
	}
	defer runs.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:       ebpf.Tracing,
		AttachType: ebpf.AttachTraceRawTp,
		AttachTo:   "sched_switch",
		Instructions: asm.Instructions{
			// runs[0] += 1
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, runs.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
		License: "GPL",
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "flip: load tp_btf/sched_switch program: %v\n", err)
		os.Exit(1)
	}
	defer prog.Close()
	count := func() uint64 {
		var v uint64
		if err := runs.Lookup(uint32(0), &v); err != nil {
			fmt.Fprintf(os.Stderr, "flip: read the run counter: %v\n", err)
			os.Exit(1)
		}
		return v
	}
	silent := 0
	start := time.Now()
	for i := 1; i <= n; i++ {
		before := count()
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			fmt.Fprintf(os.Stderr, "flip: attach %d: %v\n", i, err)
			os.Exit(1)
		}
		// The caller keeps a CPU switching (guest.sh patching): a run
		// comes within a millisecond or two on a machine that runs the
		// patched text.
		ran := false
		for t := time.Now(); time.Since(t) < time.Second; time.Sleep(time.Millisecond) {
			if count() != before {
				ran = true
				break
			}
		}
		if !ran {
			silent++
			fmt.Printf("flip: attach %d: the program did not run in 1s\n", i)
		}
		if err := l.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "flip: detach %d: %v\n", i, err)
			os.Exit(1)
		}
		time.Sleep(time.Millisecond)
		if i%100 == 0 {
			fmt.Printf("flip %d %.1fs\n", i, time.Since(start).Seconds())
		}
	}
	fmt.Printf("flips=%d s=%.1f silent=%d\n", n, time.Since(start).Seconds(), silent)
	if silent > 0 {
		os.Exit(1)
	}
}
