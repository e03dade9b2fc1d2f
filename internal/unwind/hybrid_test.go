package unwind

import (
	"encoding/binary"
	"slices"
	"testing"
)

// fakeCode maps address ranges of made-up functions to their rules.
type fakeCode []struct {
	start, end uint64
	rule       Rule
}

func (c fakeCode) lookup(pc uint64) Rule {
	for _, f := range c {
		if pc >= f.start && pc < f.end {
			return f.rule
		}
	}
	return Rule{}
}

// Functions of the synthetic stacks: each occupies [base, base+0x100),
// and a return address into one is base+0x10.
const (
	fnStart  = 0x1000 // outermost: the return address is undefined
	fnMain   = 0x2000 // frame pointer
	fnQsort  = 0x3000 // frameless, CFA = rsp+32, rbp untouched
	fnCmp    = 0x4000 // frame pointer
	fnLeaf   = 0x5000 // frameless leaf, CFA = rsp+8
	fnGPR    = 0x6000 // frameless, pushes rbp at CFA-16 and uses it as a general register
	fnNoInfo = 0x7000 // no unwind rule
	fnBig    = 0x8000 // frameless with 1600 bytes of locals: CFA = rsp+1608
	fnEpi    = 0x9000 // in an epilogue: rbp popped, its rule still "at CFA-48"
	fnBigGPR = 0xa000 // frameless with 1600 bytes of frame, rbp saved at CFA-16 and used as a general register
)

var (
	fpRule    = Rule{Kind: FPOffset, Offset: 16, FP: FPAtCFA, FPOffset: -16}
	synthetic = fakeCode{
		{fnStart, fnStart + 0x100, Rule{Kind: SPOffset, Offset: 8, Outermost: true}},
		{fnMain, fnMain + 0x100, fpRule},
		{fnQsort, fnQsort + 0x100, Rule{Kind: SPOffset, Offset: 32}},
		{fnCmp, fnCmp + 0x100, fpRule},
		{fnLeaf, fnLeaf + 0x100, Rule{Kind: SPOffset, Offset: 8}},
		{fnGPR, fnGPR + 0x100, Rule{Kind: SPOffset, Offset: 24, FP: FPAtCFA, FPOffset: -16}},
		{fnBig, fnBig + 0x100, Rule{Kind: SPOffset, Offset: 1608}},
		{fnEpi, fnEpi + 0x100, Rule{Kind: SPOffset, Offset: 24, FP: FPAtCFA, FPOffset: -48}},
		{fnBigGPR, fnBigGPR + 0x100, Rule{Kind: SPOffset, Offset: 1608, FP: FPAtCFA, FPOffset: -16}},
	}
)

func ret(fn uint64) uint64 { return fn + 0x10 }

// stackBuilder lays out a stack downwards from top, as calls do, and then
// runs the kernel's frame-pointer walk over it.
type stackBuilder struct {
	top, sp uint64
	words   map[uint64]uint64
}

func newStack() *stackBuilder {
	return &stackBuilder{top: 0x7ff0000, sp: 0x7ff0000, words: map[uint64]uint64{}}
}

func (b *stackBuilder) push(v uint64) uint64 {
	b.sp -= 8
	b.words[b.sp] = v
	return b.sp
}

// fpFrame is "call fn; push rbp; mov rsp, rbp": returns the new rbp.
func (b *stackBuilder) fpFrame(ra, rbp uint64) uint64 {
	b.push(ra)
	return b.push(rbp)
}

func (b *stackBuilder) window(sp uint64, n int) []byte {
	w := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(w[i:], b.words[sp+uint64(i)])
	}
	return w
}

// kernelChain is bpf/sampler.bpf.c's walk: it follows rbp through all of
// memory, not only the window.
func (b *stackBuilder) kernelChain(ip, bp uint64) []uint64 {
	chain := []uint64{ip}
	for bp >= 4096 && bp&7 == 0 && len(chain) < 127 {
		ra, ok := b.words[bp+8]
		if !ok {
			break
		}
		chain = append(chain, ra)
		bp = b.words[bp]
	}
	return chain
}

func TestWalk(t *testing.T) {
	type want struct {
		frames []uint64
		stop   Stop
		cfi    int
	}
	tests := []struct {
		name   string
		build  func(b *stackBuilder) (ip, bp uint64)
		window int
		want   want
	}{{
		name: "frame pointers all the way: the kernel's chain",
		build: func(b *stackBuilder) (uint64, uint64) {
			b.push(0) // _start's return address: none
			bp := b.fpFrame(ret(fnStart), 0)
			bp = b.fpFrame(ret(fnMain), bp)
			return fnCmp + 0x40, bp
		},
		window: 1024,
		want:   want{[]uint64{fnCmp + 0x40, ret(fnMain), ret(fnStart)}, StopOutermost, 0},
	}, {
		name: "frameless leaf: its caller comes from the window",
		build: func(b *stackBuilder) (uint64, uint64) {
			bp := b.fpFrame(ret(fnStart), 0)
			bp = b.fpFrame(ret(fnMain), bp)
			b.push(ret(fnCmp)) // the leaf's return address; rbp is still cmp's
			return fnLeaf + 0x20, bp
		},
		window: 1024,
		want:   want{[]uint64{fnLeaf + 0x20, ret(fnCmp), ret(fnMain), ret(fnStart)}, StopOutermost, 1},
	}, {
		name: "qsort: a frame-pointer callback of frameless code",
		build: func(b *stackBuilder) (uint64, uint64) {
			bp := b.fpFrame(ret(fnStart), 0)
			mainBP := bp
			b.push(ret(fnMain)) // call qsort
			b.push(0xdead)      // qsort's three spilled registers
			b.push(0xbeef)
			b.push(0xf00d)
			bp = b.fpFrame(ret(fnQsort), mainBP) // cmp saves main's rbp
			return fnCmp + 0x30, bp
		},
		window: 1024,
		// The kernel saw cmp, qsort, then main's caller: main was lost.
		want: want{[]uint64{fnCmp + 0x30, ret(fnQsort), ret(fnMain), ret(fnStart)}, StopOutermost, 1},
	}, {
		name: "rbp as a general register: the chain ran into garbage",
		build: func(b *stackBuilder) (uint64, uint64) {
			bp := b.fpFrame(ret(fnStart), 0)
			bp = b.fpFrame(ret(fnMain), bp)
			b.push(ret(fnMain)) // main calls gpr
			b.push(bp)          // gpr saves rbp at CFA-16
			b.push(0x1111)      // and a spill
			garbage := uint64(0x7ff0ff8)
			bp = b.fpFrame(ret(fnGPR), garbage) // cmp saves gpr's rbp: garbage
			return fnCmp + 0x30, bp
		},
		window: 1024,
		want:   want{[]uint64{fnCmp + 0x30, ret(fnGPR), ret(fnMain), ret(fnMain), ret(fnStart)}, StopOutermost, 3},
	}, {
		name: "frameless frame beyond the window: cut, not guessed",
		build: func(b *stackBuilder) (uint64, uint64) {
			bp := b.fpFrame(ret(fnStart), 0)
			mainBP := bp
			b.push(ret(fnMain))
			for range 200 { // big's locals: its CFA is beyond a 1 KiB window
				b.push(0)
			}
			bp = b.fpFrame(ret(fnBig), mainBP)
			return fnCmp + 0x30, bp
		},
		window: 1024,
		want:   want{[]uint64{fnCmp + 0x30, ret(fnBig)}, StopWindow, 0},
	}, {
		name: "epilogue: the frame pointer's save slot is below sp, the register restored",
		build: func(b *stackBuilder) (uint64, uint64) {
			bp := b.fpFrame(ret(fnStart), 0)
			bp = b.fpFrame(ret(fnMain), bp)
			b.push(ret(fnCmp)) // epi's return address, then two registers not popped yet
			b.push(0x2222)
			b.push(0x3333)
			return fnEpi + 0x40, bp // rbp is cmp's again
		},
		window: 1024,
		want:   want{[]uint64{fnEpi + 0x40, ret(fnCmp), ret(fnMain), ret(fnStart)}, StopOutermost, 1},
	}, {
		name: "frameless code under frames beyond the window: the chain's frames kept",
		build: func(b *stackBuilder) (uint64, uint64) {
			b.push(ret(fnStart)) // qsort's caller... is _start's frame, frameless
			b.push(0)
			b.push(0)
			b.push(0)
			bp := b.fpFrame(ret(fnQsort), 0) // main, called from qsort
			for range 100 {                  // main's locals: the rest is beyond the window
				b.push(0)
			}
			bp = b.fpFrame(ret(fnMain), bp)
			return fnCmp + 0x30, bp
		},
		window: 256,
		want:   want{[]uint64{fnCmp + 0x30, ret(fnMain), ret(fnQsort)}, StopBelowWindow, 0},
	}, {
		// vfprintf's shape: a frameless function with a large frame that
		// uses rbp as a general register calls a frame-pointer function
		// (glibc's __printf_fp_l), so the kernel's walk ends under it.
		// Its frame starts inside the window: a wider window holds it.
		name: "a large frameless frame under the chain's last frame: a window cut",
		build: func(b *stackBuilder) (uint64, uint64) {
			b.push(0)
			bp := b.fpFrame(ret(fnStart), 0) // main's frame
			b.push(ret(fnMain))              // the large function's return address
			b.push(bp)                       // main's rbp, saved at CFA-16
			for range 199 {
				b.push(0)
			}
			bp = b.fpFrame(ret(fnBigGPR), 3) // rbp held a number at the call
			return fnCmp + 0x30, bp
		},
		window: 1024,
		want:   want{[]uint64{fnCmp + 0x30, ret(fnBigGPR)}, StopWindow, 0},
	}, {
		name: "the same stack in a window that holds it",
		build: func(b *stackBuilder) (uint64, uint64) {
			b.push(0)
			bp := b.fpFrame(ret(fnStart), 0)
			b.push(ret(fnMain))
			b.push(bp)
			for range 199 {
				b.push(0)
			}
			bp = b.fpFrame(ret(fnBigGPR), 3)
			return fnCmp + 0x30, bp
		},
		window: 4096,
		want:   want{[]uint64{fnCmp + 0x30, ret(fnBigGPR), ret(fnMain), ret(fnStart)}, StopOutermost, 2},
	}, {
		name: "a frame without unwind information off the chain",
		build: func(b *stackBuilder) (uint64, uint64) {
			b.fpFrame(ret(fnStart), 0)
			b.push(ret(fnNoInfo))
			return fnLeaf, 0x1234
		},
		window: 1024,
		want:   want{[]uint64{fnLeaf, ret(fnNoInfo)}, StopNoInfo, 1},
	}, {
		name: "code without tables on the chain: the kernel's walk",
		build: func(b *stackBuilder) (uint64, uint64) {
			bp := b.fpFrame(ret(fnStart), 0)
			bp = b.fpFrame(ret(fnMain), bp)
			return fnNoInfo + 0x20, bp
		},
		window: 1024,
		want:   want{[]uint64{fnNoInfo + 0x20, ret(fnMain), ret(fnStart)}, StopOutermost, 0},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newStack()
			ip, bp := tt.build(b)
			s := Stack{IP: ip, SP: b.sp, FP: bp, Window: b.window(b.sp, tt.window), Chain: b.kernelChain(ip, bp)}
			frames, res := Walk(s, synthetic.lookup, nil, 127)
			if !slices.Equal(frames, tt.want.frames) || res.Stop != tt.want.stop || res.CFIFrames != tt.want.cfi {
				t.Errorf("Walk = %#x, %v, %d CFI frames; want %#x, %v, %d\n(kernel chain %#x)",
					frames, res.Stop, res.CFIFrames, tt.want.frames, tt.want.stop, tt.want.cfi, s.Chain)
			}
			if res.Stop != StopBelowWindow && (res.Stop == StopWindow) != (res.Needed > uint64(len(s.Window))) {
				t.Errorf("stop %v with %d bytes needed of a %d-byte window", res.Stop, res.Needed, len(s.Window))
			}
		})
	}
}

// TestWalkDepth: the bound holds, and says so.
func TestWalkDepth(t *testing.T) {
	b := newStack()
	bp := uint64(0)
	for range 20 {
		bp = b.fpFrame(ret(fnMain), bp)
	}
	s := Stack{IP: fnMain, SP: b.sp, FP: bp, Window: b.window(b.sp, 1024), Chain: b.kernelChain(fnMain, bp)}
	frames, res := Walk(s, synthetic.lookup, nil, 5)
	if len(frames) != 5 || res.Stop != StopDepth {
		t.Errorf("Walk = %d frames, %v; want 5, depth", len(frames), res.Stop)
	}
}

// TestWalkEntryNotNeeded: a deep stack's entry code (frameless, under the
// kernel's last frame, beyond the first window) is unwound when the window
// holds it, but the bytes it took do not count in Needed, so a process's
// window is not sized to reach start_thread's caller. The same entry frame
// inside the first window counts.
func TestWalkEntryNotNeeded(t *testing.T) {
	for _, tt := range []struct {
		locals     int // words of main's frame
		wantNeeded func(n uint64) bool
	}{
		{locals: 200, wantNeeded: func(n uint64) bool { return n == 0 }},
		{locals: 10, wantNeeded: func(n uint64) bool { return n > 0 && n <= FirstWindow }},
	} {
		b := newStack()
		b.push(0) // the entry's caller (_start, outermost)
		b.push(ret(fnStart))
		b.push(0)
		b.push(0)
		b.push(0)
		bp := b.fpFrame(ret(fnQsort), 0) // main, called from the frameless entry (rbp 0)
		for range tt.locals {
			b.push(0)
		}
		bp = b.fpFrame(ret(fnMain), bp)
		ip := uint64(fnCmp + 0x30)
		s := Stack{IP: ip, SP: b.sp, FP: bp, Window: b.window(b.sp, 4096), Chain: b.kernelChain(ip, bp)}
		frames, res := Walk(s, synthetic.lookup, nil, 127)
		want := []uint64{ip, ret(fnMain), ret(fnQsort), ret(fnStart)}
		if !slices.Equal(frames, want) || res.Stop != StopOutermost {
			t.Errorf("locals %d: Walk = %#x, %v; want %#x, outermost", tt.locals, frames, res.Stop, want)
		}
		if !tt.wantNeeded(res.Needed) {
			t.Errorf("locals %d: %d bytes needed", tt.locals, res.Needed)
		}
	}
}

// jitCode adds a region of JIT code (no table) to the synthetic functions.
const fnJIT = 0xb000

func jitLookup(pc uint64) Rule {
	if pc >= fnJIT && pc < fnJIT+0x100 {
		return Rule{JIT: true}
	}
	return synthetic.lookup(pc)
}

// pythonStack lays out CPython's shape under -X perf: main calls the
// frameless evaluator (rbp saved and used as a general register), which
// calls a trampoline of JIT code (push rbp; mov rsp, rbp; call), which
// calls the evaluator again, which calls a frameless leaf. tramp changes
// the trampoline's frame link before the evaluator's frame is pushed.
func pythonStack(b *stackBuilder, tramp func(b *stackBuilder, bp uint64) uint64) (ip, bp uint64) {
	b.push(0)
	bp0 := b.fpFrame(ret(fnStart), 0) // main
	b.push(ret(fnMain))               // main calls the evaluator
	b.push(bp0)                       // which saves rbp at CFA-16
	b.push(0x1111)
	b.push(ret(fnGPR))      // the evaluator calls the trampoline
	trampBP := b.push(0x50) // which saves the evaluator's rbp (a number)
	trampBP = tramp(b, trampBP)
	b.push(ret(fnJIT)) // the trampoline calls the evaluator
	b.push(trampBP)    // which saves the trampoline's rbp
	b.push(0x2222)
	b.push(ret(fnGPR)) // the evaluator calls the leaf
	return fnLeaf + 0x20, 0x77
}

// TestWalkJITLink: JIT code off the kernel's chain is left by its
// frame-pointer link when every check holds, and the walk stops, counted,
// when one fails.
func TestWalkJITLink(t *testing.T) {
	keep := func(b *stackBuilder, bp uint64) uint64 { return bp }
	tests := []struct {
		name   string
		tramp  func(b *stackBuilder, bp uint64) uint64
		ip     uint64 // the sampled address, when not the leaf's
		window int
		frames []uint64
		stop   Stop
		links  int
	}{{
		name: "a trampoline between frameless frames", tramp: keep, window: 1024,
		frames: []uint64{fnLeaf + 0x20, ret(fnGPR), ret(fnJIT), ret(fnGPR), ret(fnMain), ret(fnStart)},
		stop:   StopOutermost, links: 1,
	}, {
		name: "the link below the stack pointer", window: 1024,
		tramp:  func(b *stackBuilder, bp uint64) uint64 { return b.sp - 64 },
		frames: []uint64{fnLeaf + 0x20, ret(fnGPR), ret(fnJIT)},
		stop:   StopBadLink,
	}, {
		name: "the link misaligned", window: 1024,
		tramp:  func(b *stackBuilder, bp uint64) uint64 { return bp + 4 },
		frames: []uint64{fnLeaf + 0x20, ret(fnGPR), ret(fnJIT)},
		stop:   StopBadLink,
	}, {
		name: "the link's return address into no code", window: 1024,
		tramp: func(b *stackBuilder, bp uint64) uint64 {
			b.push(0x99999) // a word that is no return address
			return b.push(bp)
		},
		frames: []uint64{fnLeaf + 0x20, ret(fnGPR), ret(fnJIT)},
		stop:   StopBadLink,
	}, {
		name: "the link beyond the window", window: 1024,
		tramp: func(b *stackBuilder, bp uint64) uint64 {
			return bp + 4096 // a well-formed address the window does not hold
		},
		frames: []uint64{fnLeaf + 0x20, ret(fnGPR), ret(fnJIT)},
		stop:   StopWindow,
	}, {
		name: "a JIT leaf is not left by its link", tramp: keep, ip: fnJIT + 0x08, window: 1024,
		frames: []uint64{fnJIT + 0x08},
		stop:   StopNoInfo,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newStack()
			ip, bp := pythonStack(b, tt.tramp)
			if tt.ip != 0 {
				ip = tt.ip
			}
			s := Stack{IP: ip, SP: b.sp, FP: bp, Window: b.window(b.sp, tt.window), Chain: b.kernelChain(ip, bp)}
			frames, res := Walk(s, jitLookup, nil, 127)
			if !slices.Equal(frames, tt.frames) || res.Stop != tt.stop || res.JITFrames != tt.links {
				t.Errorf("Walk = %#x, %v, %d link frames; want %#x, %v, %d", frames, res.Stop, res.JITFrames, tt.frames, tt.stop, tt.links)
			}
		})
	}
	// Without the JIT mark the same stack stops at the trampoline.
	b := newStack()
	ip, bp := pythonStack(b, keep)
	s := Stack{IP: ip, SP: b.sp, FP: bp, Window: b.window(b.sp, 1024), Chain: b.kernelChain(ip, bp)}
	if frames, res := Walk(s, synthetic.lookup, nil, 127); res.Stop != StopNoInfo || len(frames) != 3 {
		t.Errorf("without JIT regions: Walk = %#x, %v; want 3 frames, no unwind info", frames, res.Stop)
	}
}

// TestWalkJITRule: CPython's perf trampoline of 3.12 and 3.13 (sub $8,
// %rsp; call *%rcx; add $8, %rsp; ret) keeps no frame pointer; the rule
// its instructions give at the return address (Stack.JITRule) takes the
// walk on to its caller, and without them it stops there.
func TestWalkJITRule(t *testing.T) {
	b := newStack()
	b.push(0)
	bp0 := b.fpFrame(ret(fnStart), 0) // main
	b.push(ret(fnMain))               // main calls the evaluator
	b.push(bp0)                       // which saves rbp at CFA-16
	b.push(0x1111)
	b.push(ret(fnGPR)) // the evaluator calls the trampoline
	b.push(0xaaaa)     // which subtracts 8 from rsp
	b.push(ret(fnJIT)) // and calls the evaluator
	b.push(0x50)       // which saves rbp, a number the first evaluator left there
	b.push(0x2222)
	b.push(ret(fnGPR)) // the evaluator calls the leaf
	ip := uint64(fnLeaf + 0x20)
	rules := func(pc uint64) (Rule, bool) {
		if pc == ret(fnJIT) {
			return EpilogueRule([]byte{0x48, 0x83, 0xc4, 0x08, 0xc3})
		}
		return Rule{}, false
	}
	s := Stack{IP: ip, SP: b.sp, FP: 0x77, Window: b.window(b.sp, 1024), Chain: b.kernelChain(ip, 0x77), JITRule: rules}
	frames, res := Walk(s, jitLookup, nil, 127)
	want := []uint64{ip, ret(fnGPR), ret(fnJIT), ret(fnGPR), ret(fnMain), ret(fnStart)}
	if !slices.Equal(frames, want) || res.Stop != StopOutermost || res.JITFrames != 1 {
		t.Errorf("Walk = %#x, %v, %d JIT frames; want %#x, outermost, 1", frames, res.Stop, res.JITFrames, want)
	}
	s.JITRule = func(uint64) (Rule, bool) { return Rule{}, false }
	frames, res = Walk(s, jitLookup, nil, 127)
	// rbp (0x50) is no frame link: the walk stops at the trampoline.
	if !slices.Equal(frames, want[:3]) || res.Stop != StopBadLink {
		t.Errorf("without the instructions' rule: Walk = %#x, %v; want %#x, %v", frames, res.Stop, want[:3], StopBadLink)
	}
}
