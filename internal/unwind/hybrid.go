package unwind

import "encoding/binary"

// Stack is what the kernel captured of one user stack: the registers, a
// copy of the stack from the stack pointer up, and its own frame-pointer
// walk.
type Stack struct {
	IP, SP, FP uint64
	// Window holds user memory at [SP, SP+len(Window)).
	Window []byte
	// Chain is the kernel's frame-pointer walk: Chain[0] is IP, Chain[i]
	// the return address it read at f(i-1)+8, where f(0) is FP and f(i)
	// the word at f(i-1).
	Chain []uint64
	// LinkRegister: the stack is arm64's, whose sampled frame may keep
	// its return address in LR (x30) rather than in memory, where its
	// rules say so (Rule.RA).
	LinkRegister bool
	LR           uint64
	// PACMask holds the bits of a return address that pointer
	// authentication uses (arm64, the kernel's NT_ARM_PAC_MASK): they are
	// cleared from every return address the walk reads. Chain is
	// stripped already.
	PACMask uint64
	// JITRule, when set, returns the rule of JIT code at pc (a return
	// address, or IP) read from its instructions (EpilogueRule), ok false
	// when they are not a straight run to a return or cannot be read.
	JITRule func(pc uint64) (r Rule, ok bool)
}

// Stop says why a walk ended.
type Stop uint8

const (
	// StopOutermost: the rules mark the last frame as the stack's first
	// (_start, clone3) or its return address is zero: a whole stack.
	StopOutermost Stop = iota
	// StopChainEnd: the rules said to follow the frame pointer, and the
	// kernel's walk had ended there (a frame pointer of zero or outside
	// user memory, or its own depth bound).
	StopChainEnd
	// StopWindow: the next frame lies in stack bytes beyond the window.
	StopWindow
	// StopNoInfo: a frame's address has no unwind rule, and its frame
	// pointer is not one the kernel walked from.
	StopNoInfo
	// StopBadRule: a rule the walk cannot evaluate (a DWARF expression, a
	// CFA in another register, the frame pointer lost).
	StopBadRule
	// StopDepth: the walk reached its frame bound.
	StopDepth
	// StopBelowWindow: frameless code under the kernel's last frame, whose
	// bytes lie beyond the window (the C library's frames under main or
	// start_thread, in a stack deeper than the window, where the kernel's
	// walk ended too). A window holding them would hold the whole stack:
	// the frames up to there are kept, and the window is not widened.
	StopBelowWindow
	// StopBadLink: code without a rule in anonymous executable memory
	// (Rule.JIT), off the kernel's chain, whose frame pointer is not a
	// frame link the walk can follow: not above the stack pointer, not
	// aligned, or its return address not into code with a rule or JIT
	// code.
	StopBadLink
)

var stopNames = [...]string{"outermost", "chain end", "window", "no unwind info", "bad rule", "depth", "below window", "bad frame link"}

func (s Stop) String() string {
	if int(s) < len(stopNames) {
		return stopNames[s]
	}
	return "unknown"
}

// FirstWindow is the window every sample carries (the kernel's first
// chunk of the stack, STACK_SNAP_BYTES): frames under the kernel's last
// frame that start beyond it are a deep stack's entry code, which the walk
// unwinds when a wider window holds them but does not count in
// Result.Needed.
const FirstWindow = 1024

// Result says how a walk went.
type Result struct {
	Stop Stop
	// CFIFrames counts the frames found by CFA rules in the window rather
	// than taken from the kernel's chain.
	CFIFrames int
	// JITFrames counts the frames of JIT code off the kernel's chain
	// left by the rule of their instructions (Stack.JITRule: CPython's
	// perf trampolines) or by their frame-pointer link.
	JITFrames int
	// Needed is how many bytes of the window from SP the walk read, or
	// would have read for the word it stopped at (StopWindow): what a
	// window must hold for this stack, less the entry code under a deep
	// stack (FirstWindow).
	Needed uint64
}

// Lookup returns the unwind rule at an address of the process: Rule{}
// (Unknown) when no table covers it. An address in no mapping has none:
// the walk follows the kernel's chain there, and the profile's builder,
// which reads a process's mappings again before it judges an address in
// none of them, cuts the stack (collect.Stats.StacksCut).
type Lookup func(pc uint64) Rule

// Walk unwinds s: frames with a frame pointer of their own come from the
// kernel's chain, frames without one (an RSP-based CFA: glibc, the vDSO,
// GCC leaves) from their CFA rules in the window, and every frame of the
// chain is checked against the rule of the function it returns into, so
// that a frame-pointer function called from frameless code (a qsort
// comparator) or code using the frame pointer as a general register
// continues with CFA rules rather than a chain that skipped or invented
// callers. Frames are appended to dst, leaf first, at most maxFrames. Nothing
// is guessed: the walk stops where a rule or the bytes it needs are
// missing, and Result says why.
func Walk(s Stack, lookup Lookup, dst []uint64, maxFrames int) (frames []uint64, res Result) {
	w := walker{s: s, lr: s.LinkRegister}
	w.chainFrames()
	w.needed = 0 // the chain's frames are the kernel's; only the walk's reads count
	defer func() {
		res.Needed = w.needed
		if w.entryFrom >= 0 {
			res.Needed = uint64(w.entryFrom)
		}
	}()
	w.entryFrom = -1
	frames = append(dst, s.IP)
	n := 1
	pc, sp, fp := s.IP, s.SP, s.FP
	spOK, fpOK := true, true
	at := 0            // fp is the frame address the kernel read Chain[at+1] from; -1 when not
	fromChain := false // the last frame came from the kernel's chain
	for first := true; ; first = false {
		if n >= maxFrames {
			res.Stop = StopDepth
			return frames, res
		}
		q := pc
		if !first {
			q = pc - 1 // the call instruction: a return address may start the next function
		}
		r := lookup(q)
		jit := false
		if r.JIT && at < 0 && s.JITRule != nil {
			// JIT code off the kernel's chain: its own instructions
			// may say where its caller is.
			if jr, ok := s.JITRule(pc); ok {
				r, jit = jr, true
			}
		}
		if r.Outermost {
			res.Stop = StopOutermost
			return frames, res
		}
		var ra uint64
		switch {
		case r.Kind == FPOffset && at >= 0 && standardFrame(r):
			// The kernel walked from this frame pointer: its next return
			// address is this frame's.
			var ok bool
			if ra, ok = w.chainStep(&at, &sp, &fp, &spOK, &fpOK, r.Offset); !ok {
				res.Stop = StopChainEnd
				return frames, res
			}
			fromChain = true
		case r.Kind == SPOffset || r.Kind == FPOffset:
			base, ok := sp, spOK
			if w.entryFrom < 0 && fromChain && at == len(s.Chain)-1 && ok && base-s.SP >= FirstWindow {
				// Frameless code under the kernel's last frame, beyond
				// the first window: the thread's or program's entry
				// (start_thread, __libc_start_call_main) under a deep
				// stack. Unwound when the window holds it, but not worth
				// a wider window (StopBelowWindow): what the stack
				// needed is what it needed up to here.
				w.entryFrom = int64(w.needed)
			}
			if r.Kind == FPOffset {
				base, ok = fp, fpOK
				if !ok {
					res.Stop = StopBadRule
					return frames, res
				}
			}
			if !ok {
				// sp comes from a chain frame beyond the window: the
				// bytes are beyond it too.
				w.needed = max(w.needed, uint64(len(s.Window))+8)
				res.Stop = w.cut(at, fromChain, false)
				return frames, res
			}
			cfa := base + uint64(r.Offset)
			var got bool
			switch ra, got = w.returnAddress(r, cfa, sp, spOK); {
			case !got && w.lost:
				res.Stop = StopBadRule
				return frames, res
			case !got:
				res.Stop = w.cut(at, fromChain, w.inWindow(base))
				return frames, res
			}
			switch slot := cfa + uint64(r.FPOffset); {
			case r.FP == FPAtCFA && spOK && slot < sp:
				// An epilogue: compilers keep the save slot's rule
				// after popping the register, and the slot lies below
				// the stack pointer. The register holds the caller's
				// value again.
			case r.FP == FPAtCFA:
				if fp, got = w.word(slot); !got {
					res.Stop = w.cut(at, fromChain, w.inWindow(base))
					return frames, res
				}
				fpOK, at = true, w.match(fp)
			case r.FP == FPLost:
				fpOK, at = false, -1
			}
			sp, spOK = cfa, true
			if jit {
				res.JITFrames++
			} else {
				res.CFIFrames++
			}
			fromChain = false
		case at >= 0:
			// No rule: code without tables (JIT code, a stripped
			// binary); the kernel's walk is all there is, as without
			// this unwinder. Its frame is x86-64's push rbp; mov rsp,
			// rbp; an arm64 frame record says nothing of the frame's
			// size.
			off := int64(16)
			if s.LinkRegister {
				off = -1
			}
			var ok bool
			if ra, ok = w.chainStep(&at, &sp, &fp, &spOK, &fpOK, off); !ok {
				res.Stop = StopNoInfo
				return frames, res
			}
			fromChain = true
		case r.JIT && fpOK && !first:
			// JIT code off the kernel's chain: a trampoline or compiled
			// method that keeps a frame pointer (push rbp; mov rsp, rbp)
			// called from, or calling, frameless code that used rbp as a
			// general register, so the kernel's walk lost it. rbp, as
			// the rules restored it, is followed when it is a frame link.
			// A return address into JIT code is past its prologue, so
			// its frame is set up; a sampled JIT leaf may not be, and is
			// not left this way (StopNoInfo).
			var stop Stop
			if ra, stop = w.link(&sp, &fp, &at, spOK, lookup); stop != linkOK {
				res.Stop = stop
				return frames, res
			}
			spOK = true
			res.JITFrames++
			fromChain = false
		default:
			res.Stop = StopNoInfo
			return frames, res
		}
		// The link register holds the sampled frame's return address
		// only: the next frame's is where its rules say.
		w.lr = false
		if ra &^= s.PACMask; ra == 0 {
			res.Stop = StopOutermost
			return frames, res
		}
		frames = append(frames, ra)
		n++
		pc = ra
	}
}

// chainStep takes the next frame from the kernel's chain: the return
// address it read from the frame at position at, whose frame pointer fp
// gives the caller's stack pointer, fp+cfa, when the window showed fp and
// the frame's size is known (cfa ≥ 0), and whose saved frame pointer the
// next position's. It returns false at the chain's end.
func (w *walker) chainStep(at *int, sp, fp *uint64, spOK, fpOK *bool, cfa int64) (uint64, bool) {
	if *at+1 >= len(w.s.Chain) {
		return 0, false
	}
	ra := w.s.Chain[*at+1]
	if *spOK = *fpOK && cfa >= 0; *spOK {
		*sp = *fp + uint64(cfa)
	}
	*at++
	*fp, *fpOK = w.chainFP(*at)
	return ra, true
}

// linkOK is link's answer when the link was followed.
const linkOK Stop = 255

// link follows the frame-pointer link of a frame of JIT code at stack
// pointer sp whose frame pointer is fp: the caller's frame pointer at fp,
// its return address at fp+8. The link is followed only when fp lies at
// or above sp (a frame without locals, such as a trampoline's, calls with
// rsp == rbp; the caller's sp, fp+16, is above it either way, so the walk
// always moves up the stack), is aligned, both words lie in the window, and the
// return address returns into code with a rule or into JIT code; anything
// else stops the walk (StopBadLink, or StopWindow for words beyond the
// window), since a frame pointer that fails a check is a general register
// and what it points at is not a frame.
func (w *walker) link(sp, fp *uint64, at *int, spOK bool, lookup Lookup) (uint64, Stop) {
	if !spOK || *fp < *sp || *fp&7 != 0 {
		return 0, StopBadLink
	}
	next, ok1 := w.word(*fp)
	ra, ok2 := w.word(*fp + 8)
	if !ok1 || !ok2 {
		return 0, StopWindow
	}
	ra &^= w.s.PACMask
	if ra == 0 {
		return 0, StopBadLink
	}
	if r := lookup(ra - 1); r.Kind == Unknown && !r.Outermost && !r.JIT {
		return 0, StopBadLink
	}
	*sp = *fp + 16
	*fp = next
	*at = w.match(next)
	return ra, linkOK
}

// cut says why a walk stopped for bytes beyond the window. Below the
// kernel's last frame, reached through its chain, frameless code whose
// frame starts beyond the window is the bottom of a stack deeper than the
// window (StopBelowWindow: start_thread's or __libc_start_call_main's
// frames under a deep stack). Everywhere else a wider window would have
// the bytes (StopWindow), also for frameless code under the chain's last
// frame whose frame starts inside the window but ends beyond it: a large
// frame such as vfprintf's work buffer under a frame-pointer function it
// calls (glibc's __printf_fp_l), where the kernel's walk ended because the
// frameless code used the frame pointer as a general register. spIn says
// whether the frame (its CFA rule's base) starts inside the window.
func (w *walker) cut(at int, fromChain, spIn bool) Stop {
	if fromChain && at == len(w.s.Chain)-1 && !spIn {
		return StopBelowWindow
	}
	return StopWindow
}

// standardFrame reports whether r is the frame the kernel's walk assumes:
// on x86-64 the one every compiler's "push rbp; mov rsp, rbp" sets up; on
// arm64 a frame record {x29, x30} at x29, wherever the frame's CFA is
// (gcc keeps the record at the bottom of the frame, clang at the top).
func standardFrame(r Rule) bool {
	if r.RA == RABelowCFA {
		return r.Offset == 16 && r.FP == FPAtCFA && r.FPOffset == -16
	}
	return r.FP == FPAtCFA && r.FPOffset == -r.Offset && r.RA == RAAtCFA && r.RAOffset == r.FPOffset+8
}

// returnAddress reads the return address of a frame whose CFA is cfa by
// rule r: the word under the CFA on x86-64; on arm64 its save slot, or the
// link register in the sampled frame before the slot is written or after
// it was loaded again (a slot below the stack pointer, sp, is an
// epilogue's). ok false with w.lost set: the rule says the return address
// is nowhere the walk can read (the link register of a frame other than
// the sampled one, another register).
func (w *walker) returnAddress(r Rule, cfa, sp uint64, spOK bool) (ra uint64, ok bool) {
	w.lost = false
	switch r.RA {
	case RABelowCFA:
		return w.word(cfa - 8)
	case RAAtCFA:
		slot := cfa + uint64(r.RAOffset)
		if w.lr && spOK && slot < sp {
			return w.s.LR, true
		}
		return w.word(slot)
	case RAInLR:
		if w.lr {
			return w.s.LR, true
		}
	}
	w.lost = true
	return 0, false
}

// maxChainFrames bounds the frame addresses of the chain a walk
// reconstructs from the window: a 8 KiB window holds at most 512 frames,
// but a stack that deep in frame-pointer code is not unwound by rules.
// Past it, the chain's frames are still followed, by position.
const maxChainFrames = 64

// walker reads the window and knows the frame addresses of the kernel's
// chain that lie inside it. It lives on its caller's stack: a walk runs
// per sample.
type walker struct {
	s Stack
	// fps[:nfps]: fps[i] is the frame address the kernel read Chain[i+1]
	// from, for as many as the window shows (fps[0] is the FP register).
	fps  [maxChainFrames]uint64
	nfps int
	// needed is the end of the highest word read, from SP.
	needed uint64
	// entryFrom is needed when the walk went on into the entry code under
	// the kernel's last frame, beyond the first window; -1 before.
	entryFrom int64
	// lr: the link register still holds the return address of the frame
	// being unwound (arm64, the sampled frame); lost: returnAddress found
	// none by its rule.
	lr, lost bool
}

// inWindow reports whether addr lies inside the window.
func (w *walker) inWindow(addr uint64) bool {
	return addr >= w.s.SP && addr-w.s.SP < uint64(len(w.s.Window))
}

// word reads the 8 bytes at addr from the window.
func (w *walker) word(addr uint64) (uint64, bool) {
	if addr < w.s.SP || addr-w.s.SP > 1<<30 {
		return 0, false
	}
	off := addr - w.s.SP
	w.needed = max(w.needed, off+8)
	if off+8 > uint64(len(w.s.Window)) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(w.s.Window[off:]), true
}

// chainFrames reconstructs the frame addresses of the chain from the
// window, as long as the window agrees with the kernel's walk.
func (w *walker) chainFrames() {
	if len(w.s.Chain) < 2 {
		return
	}
	w.fps[0], w.nfps = w.s.FP, 1
	for i := 1; i+1 < len(w.s.Chain) && i < maxChainFrames; i++ {
		f := w.fps[i-1]
		ra, ok1 := w.word(f + 8)
		next, ok2 := w.word(f)
		if !ok1 || !ok2 || ra&^w.s.PACMask != w.s.Chain[i] {
			return
		}
		w.fps[i], w.nfps = next, i+1
	}
}

// chainFP returns the frame address the kernel read Chain[i+1] from, when
// the window shows it.
func (w *walker) chainFP(i int) (uint64, bool) {
	if i < w.nfps {
		return w.fps[i], true
	}
	return 0, false
}

// match returns the position in the chain of frame address fp, -1 when
// the kernel did not walk from it.
func (w *walker) match(fp uint64) int {
	for i, f := range w.fps[:w.nfps] {
		if f == fp {
			return i
		}
	}
	return -1
}
