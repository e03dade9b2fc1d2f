package micro

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/collect"
	"github.com/spanprof/spanprof/internal/sampler"
)

//go:noinline
func stackAt(depth int, pcs []uintptr) int {
	if depth > 0 {
		return stackAt(depth-1, pcs)
	}
	return runtime.Callers(0, pcs)
}

// records returns n on-CPU records of this process spread over 64 real
// stacks of depth 8 to 40 (return addresses, as the kernel reports them).
func records(n int) []*sampler.Record {
	stacks := make([][]uint64, 64)
	for i := range stacks {
		pcs := make([]uintptr, 64)
		k := stackAt(4+i%32, pcs)
		for _, pc := range pcs[:k] {
			stacks[i] = append(stacks[i], uint64(pc))
		}
	}
	pid := uint32(os.Getpid())
	now := time.Now()
	rs := make([]*sampler.Record, n)
	for i := range rs {
		rs[i] = &sampler.Record{
			Kind: sampler.OnCPU, PID: pid, TID: pid + uint32(i%8), Comm: "bench",
			Time: now.Add(time.Duration(i) * time.Millisecond), Value: 1,
			UserStack: stacks[i%len(stacks)],
		}
	}
	return rs
}

// withStackTop gives each record what leaf recovery reads: the sampled ip
// (the stack's first address), a stack pointer and 256 bytes of stack.
func withStackTop(rs []*sampler.Record) []*sampler.Record {
	top := make([]byte, 256)
	for i := range top {
		top[i] = byte(i + 1)
	}
	for _, r := range rs {
		r.UserIP, r.UserSP, r.StackTop = r.UserStack[0], 0x7ffd0000, top
	}
	return rs
}

// BenchmarkCollect measures the agent's user-space path after decode:
// Add per record (process lookup, leaf recovery skipped without a stack
// top), then Build, which symbolizes every distinct address once per
// report. "warm" reuses one collector, so process maps and parsed
// objects are cached, as in the agent's steady state.
func BenchmarkCollect(b *testing.B) {
	rs := records(1000)
	b.Run("add-leaf/1000", func(b *testing.B) {
		// With leaf recovery, as record and the agent run: the rule at
		// the sampled ip comes from this binary's unwind tables (Go
		// pclntab) and the caller from the stack-top copy.
		rs := withStackTop(records(1000))
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			c := collect.New(collect.Options{Frequency: 99})
			c.Add(rs[0]) // reads the maps and the unwind table
			b.StartTimer()
			for _, r := range rs[1:] {
				c.Add(r)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(len(rs)-1)), "ns/sample")
	})
	b.Run("add-leaf-warm/1000", func(b *testing.B) {
		// The same with one collector throughout, as in the agent's
		// steady state: every address's rule is remembered after the
		// first round.
		rs := withStackTop(records(1000))
		c := collect.New(collect.Options{Frequency: 99})
		for _, r := range rs {
			c.Add(r)
		}
		b.ReportAllocs()
		for b.Loop() {
			for _, r := range rs {
				c.Add(r)
			}
			b.StopTimer()
			c.Build(time.Now()) // keeps memory flat; not timed
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rs)), "ns/sample")
	})
	b.Run("add/1000", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			// A fresh collector per round keeps memory flat; its first
			// Add (reading the process maps) stays out of the timing.
			b.StopTimer()
			c := collect.New(collect.Options{Frequency: 99, NoLeafRecovery: true})
			c.Add(rs[0])
			b.StartTimer()
			for _, r := range rs[1:] {
				c.Add(r)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(len(rs)-1)), "ns/sample")
	})
	for _, n := range []int{1000, 10000} {
		rs := records(n)
		b.Run(fmt.Sprintf("add+build-warm/%d", n), func(b *testing.B) {
			c := collect.New(collect.Options{Frequency: 99, NoLeafRecovery: true})
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range rs {
					c.Add(r)
				}
				if p := c.Build(time.Now()); len(p.Samples) != n {
					b.Fatalf("built %d samples, want %d", len(p.Samples), n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
		})
	}
	b.Run("add+build-cold/1000", func(b *testing.B) {
		rs := records(1000)
		b.ReportAllocs()
		for b.Loop() {
			c := collect.New(collect.Options{Frequency: 99, NoLeafRecovery: true})
			for _, r := range rs {
				c.Add(r)
			}
			c.Build(time.Now())
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/sample")
	})
}
