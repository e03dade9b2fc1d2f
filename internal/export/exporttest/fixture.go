// Package exporttest builds synthetic profiles for the exporter tests and
// benchmarks, so every output format is checked against the same data.
package exporttest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
)

// T0 is the start time of the fixtures.
var T0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// Links used by Small: two spans of one trace.
var (
	LinkA = profile.Link{
		TraceID: [16]byte{0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11},
		SpanID:  [8]byte{0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22},
	}
	LinkB = profile.Link{
		TraceID: LinkA.TraceID,
		SpanID:  [8]byte{0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33},
	}
)

// Build IDs and hashes of the Small mappings.
const (
	ServerBuildID = "5e4be7d3a1c0ffee00112233445566778899aabb"
	LibcBuildID   = "0123456789abcdef0123456789abcdef01234567"
	NoIDHash      = "feedfacefeedfacefeedfacefeedface"
)

// Small is a hand-made profile covering every case the exporters handle:
// two processes, several threads, two spans of one trace and unlinked
// samples, a kernel frame, an unsymbolized frame with and without a
// mapping, an inlined frame, a binary without build ID, and off-CPU
// samples in two wait states. Expected aggregation (see the comments)
// is what the tests assert.
func Small() *profile.Profile {
	server := &profile.Mapping{Start: 0x400000, Limit: 0x500000, Path: "/usr/bin/server", BuildID: ServerBuildID}
	libc := &profile.Mapping{Start: 0x7f1000000000, Limit: 0x7f1000200000, Offset: 0x28000, Path: "/lib/x86_64-linux-gnu/libc.so.6", BuildID: LibcBuildID}
	noid := &profile.Mapping{Start: 0x7f2000000000, Limit: 0x7f2000100000, Offset: 0x1000, Path: "/opt/lib/libnoid.so", HTLHash: NoIDHash}
	kernel := &profile.Mapping{Kernel: true}

	mainF := profile.Frame{Address: 0x401000, Function: "main.main", File: "main.go", Line: 10, Mapping: server}
	handle := profile.Frame{Address: 0x402000, Function: "main.handle", File: "handle.go", Line: 42, Mapping: server}
	syscall := profile.Frame{Address: 0xffffffff81000100, Function: "do_syscall_64", Mapping: kernel}
	schedule := profile.Frame{Address: 0xffffffff81000200, Function: "schedule", Mapping: kernel}
	condWait := profile.Frame{Address: 0x7f1000001000, Function: "pthread_cond_wait", Mapping: libc}
	unsym := profile.Frame{Address: 0x7f2000000234, Mapping: noid}
	inl := profile.Frame{Address: 0x403000, Function: "main.helper", File: "helper.go", Line: 7, Inlined: true, Mapping: server}
	outer := profile.Frame{Address: 0x403000, Function: "main.outer", File: "outer.go", Line: 20, Mapping: server}
	unmapped := profile.Frame{Address: 0x1234}

	at := func(ms int) time.Time { return T0.Add(time.Duration(ms) * time.Millisecond) }
	on := func(pid, tid uint32, name string, link profile.Link, ms int, frames ...profile.Frame) profile.Sample {
		return profile.Sample{Kind: profile.OnCPU, PID: pid, TID: tid, ThreadName: name, Frames: frames, Link: link, Time: at(ms), Value: 1}
	}
	off := func(state, reason string, ns int64, ms int) profile.Sample {
		return profile.Sample{Kind: profile.OffCPU, PID: 100, TID: 101, ThreadName: "server", Link: LinkA, Time: at(ms), Value: ns,
			State: state, Reason: reason, Frames: []profile.Frame{schedule, condWait, handle, mainF}}
	}
	return &profile.Profile{
		Start:     T0,
		End:       T0.Add(2 * time.Second),
		Frequency: 100,
		Processes: map[uint32]*profile.Process{
			100: {PID: 100, ExeName: "server", ExePath: "/usr/bin/server", ServiceName: "checkout",
				ContainerID: "c0ffee", Attributes: map[string]string{"deployment.environment.name": "prod"}},
			200: {PID: 200, ExeName: "worker", ExePath: "/usr/bin/worker"},
		},
		Samples: []profile.Sample{
			// Group 1: two events of span A on thread 101.
			on(100, 101, "server", LinkA, 1, syscall, handle, mainF),
			on(100, 101, "server", LinkA, 2, syscall, handle, mainF),
			// Same stack and thread, other span: its own group.
			on(100, 101, "server", LinkB, 3, syscall, handle, mainF),
			// Same stack and thread, no span.
			on(100, 101, "server", profile.Link{}, 4, syscall, handle, mainF),
			// Unsymbolized frame in a binary without build ID, thread 102.
			on(100, 102, "server-w", LinkA, 5, unsym, mainF),
			// Worker: an inlined frame and an unmapped address.
			on(200, 200, "worker", profile.Link{}, 6, inl, outer, mainF),
			on(200, 200, "worker", profile.Link{}, 7, unmapped, mainF),
			// Off-CPU: two S events merge, the D event stays apart.
			off("S", "futex_wait_queue", 5_000_000, 8),
			off("S", "futex_wait_queue", 3_000_000, 9),
			off("D", "io_schedule", 2_000_000, 10),
		},
		Lost: map[string]uint64{"ringbuf_full": 3, "unwind_error": 1},
	}
}

// Synthetic returns n samples spread over 4 processes, 16 threads, 64 spans
// and 256 stacks of depth 8 to 32, with a fixed seed, for benchmarks.
func Synthetic(n int) *profile.Profile {
	r := rand.New(rand.NewPCG(1, 2))
	p := &profile.Profile{Start: T0, End: T0.Add(10 * time.Second), Frequency: 99, Processes: map[uint32]*profile.Process{}}
	mappings := make([]*profile.Mapping, 8)
	for i := range mappings {
		mappings[i] = &profile.Mapping{Start: uint64(i+1) << 32, Limit: uint64(i+2) << 32,
			Path: fmt.Sprintf("/usr/lib/lib%d.so", i), BuildID: fmt.Sprintf("%040x", i+1)}
	}
	frames := make([]profile.Frame, 2048)
	for i := range frames {
		m := mappings[i%len(mappings)]
		frames[i] = profile.Frame{Address: m.Start + uint64(i)*16, Mapping: m}
		if i%5 != 0 {
			frames[i].Function = fmt.Sprintf("fn%d", i)
			frames[i].File = fmt.Sprintf("file%d.c", i%97)
			frames[i].Line = i
		}
	}
	stacks := make([][]profile.Frame, 256)
	for i := range stacks {
		depth := 8 + r.IntN(25)
		for range depth {
			stacks[i] = append(stacks[i], frames[r.IntN(len(frames))])
		}
	}
	links := make([]profile.Link, 64)
	for i := range links {
		links[i].TraceID[0], links[i].SpanID[0] = byte(i/4+1), byte(i+1)
	}
	for pid := uint32(1); pid <= 4; pid++ {
		p.Processes[pid*1000] = &profile.Process{PID: pid * 1000, ExeName: fmt.Sprintf("svc%d", pid), ExePath: fmt.Sprintf("/srv/svc%d", pid)}
	}
	p.Samples = make([]profile.Sample, n)
	for i := range p.Samples {
		pid := uint32(1+r.IntN(4)) * 1000
		tid := pid + uint32(r.IntN(4))
		s := profile.Sample{Kind: profile.OnCPU, PID: pid, TID: tid, ThreadName: fmt.Sprintf("t%d", tid%4),
			Frames: stacks[r.IntN(len(stacks))], Time: T0.Add(time.Duration(i) * time.Microsecond * 100), Value: 1}
		if r.IntN(4) != 0 {
			s.Link = links[r.IntN(len(links))]
		}
		if i%10 == 0 {
			s.Kind, s.State, s.Reason, s.Value = profile.OffCPU, "S", "futex_wait_queue", int64(1000+r.IntN(1_000_000))
		}
		p.Samples[i] = s
	}
	return p
}
