// Package unwind answers, for an instruction address of a binary, how its
// canonical frame address (CFA) is computed, so that the sampler can tell
// when a frame-pointer walk skipped a caller: a sample taken in a function
// that has not (yet, or ever) set up its frame pointer loses the caller,
// whose return address is still on the stack at CFA-8.
//
// Rules come from .eh_frame (via .eh_frame_hdr when present),
// .debug_frame, or, for Go binaries without either, the pclntab SP-delta
// table. Tables are built once per binary and evaluated per function on
// first use.
package unwind

import (
	"encoding/binary"
	"fmt"
)

// Kind says which register the CFA is relative to.
type Kind uint8

const (
	// Unknown means no unwind information, a DWARF expression or a CFA
	// register other than RSP and RBP.
	Unknown Kind = iota
	// SPOffset is CFA = RSP + Offset: the function has no frame pointer
	// of its own at this address (leaf without frame, prologue, epilogue).
	SPOffset
	// FPOffset is CFA = RBP + Offset: RBP holds this function's frame, so a
	// frame-pointer walk from here is right.
	FPOffset
)

// FPSave says where the caller's frame pointer is while a function runs.
type FPSave uint8

const (
	// FPSame: the register still holds the caller's value (DWARF's
	// default for a callee-saved register, and same_value).
	FPSame FPSave = iota
	// FPAtCFA: saved in the word at CFA+Rule.FPOffset (DW_CFA_offset).
	FPAtCFA
	// FPLost: in another register or behind an expression; the walk
	// cannot restore it.
	FPLost
)

// RASave says where the return address is while a function runs, on an
// architecture with a link register (Arch.LR).
type RASave uint8

const (
	// RABelowCFA: the word under the CFA, where a call pushed it
	// (x86-64). Every rule of an architecture without a link register
	// says this.
	RABelowCFA RASave = iota
	// RAInLR: still in the link register (x30), not stored yet or
	// restored already: a leaf, a prologue before the frame record's
	// store, an epilogue after its load.
	RAInLR
	// RAAtCFA: saved in the word at CFA+Rule.RAOffset.
	RAAtCFA
	// RALost: in another register or behind an expression.
	RALost
)

// Rule is the unwind rule at one address: how the CFA is computed, where
// the caller's frame pointer is, and whether this is the outermost frame.
type Rule struct {
	Kind   Kind
	Offset int64
	// FP and FPOffset say where the caller's frame pointer is.
	FP       FPSave
	FPOffset int64
	// RA and RAOffset say where the return address is (arm64; the
	// zero value, RABelowCFA, on x86-64).
	RA       RASave
	RAOffset int64
	// Outermost: the return address is undefined (DW_CFA_undefined of
	// the return-address column), which marks the first frame of a stack
	// (_start, the child side of clone3): the walk ends there cleanly.
	Outermost bool
	// JIT: no table covers the address, but it lies in anonymous
	// executable memory (a JIT's code, CPython's perf trampolines). The
	// walk may leave such a frame by its frame-pointer link (Walk), and
	// a frame-pointer link may return into it.
	JIT bool
	// plt, in a table's rows, is the threshold of a PLT's CFA expression
	// (pltExpression); RuleAt resolves it at the address asked.
	plt uint8
}

// at resolves a row's rule at pc: a PLT's CFA is one word higher from the
// entry's plt-th byte on (entries are 16 bytes, and their offset in the
// mapping keeps the address's low bits).
func (r Rule) at(pc uint64) Rule {
	if r.plt != 0 {
		if pc&15 >= uint64(r.plt) {
			r.Offset += 8
		}
		r.plt = 0
	}
	return r
}

// String renders the rule the way readelf --debug-dump=frames-interp does.
// Only the CFA is rendered: the other fields have columns of their own
// there.
func (r Rule) String() string {
	switch r.Kind {
	case SPOffset:
		return fmt.Sprintf("rsp+%d", r.Offset)
	case FPOffset:
		return fmt.Sprintf("rbp+%d", r.Offset)
	}
	return "unknown"
}

// CFA returns the rule of the CFA alone, as the leaf fix-up and the
// readelf comparison see it.
func (r Rule) CFA() Rule { return Rule{Kind: r.Kind, Offset: r.Offset} }

// FrameSetUp reports whether RBP holds the frame of the function at this
// address, i.e. whether a frame-pointer walk from here finds its caller.
// It is false for RSP-based and unknown rules.
func (r Rule) FrameSetUp() bool { return r.Kind == FPOffset }

// RecoverCaller returns the return address of the sampled function when
// the frame-pointer walk cannot see it. stackCopy holds the bytes of user
// memory at [sp, sp+len(stackCopy)).
//
// The rule: when the CFA is RSP-based (CFA = RSP+N), RBP still holds the
// caller's frame (or garbage), so the FP walk starts at the caller's
// caller; the skipped return address is the word just below the CFA, at
// stackCopy[N-8:N]. When the CFA is RBP-based the FP walk is right and
// ok is false; ok is also false for unknown rules and for words outside
// the copy.
func RecoverCaller(rule Rule, sp uint64, stackCopy []byte) (ra uint64, ok bool) {
	_ = sp // the copy starts at sp; kept for callers that copy with an offset
	if rule.Kind != SPOffset || rule.Offset < 8 || rule.Offset%8 != 0 {
		return 0, false
	}
	n := rule.Offset
	if n > int64(len(stackCopy)) {
		return 0, false
	}
	ra = binary.LittleEndian.Uint64(stackCopy[n-8 : n])
	return ra, ra != 0
}

// RecoverCallerLR is RecoverCaller for AArch64, where a call leaves the
// return address in the link register (x30) and a function stores it only
// in its frame record. CFA = SP+0 means the function has stored nothing
// (a leaf that does not touch sp, a function at its first instruction or
// past its epilogue): x30 still holds the return address. Any other rule
// says nothing about where the return address is, so no frame is guessed.
// Go's pclntab rules are not read on arm64 (they follow amd64's layout).
func RecoverCallerLR(rule Rule, lr uint64) (ra uint64, ok bool) {
	if rule.Kind != SPOffset || rule.Offset != 0 || rule.RA != RAInLR || lr == 0 {
		return 0, false
	}
	return lr, true
}
