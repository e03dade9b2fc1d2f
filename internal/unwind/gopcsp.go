package unwind

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sort"

	"github.com/spanprof/spanprof/internal/elfmap"
	"github.com/spanprof/spanprof/internal/gopclntab"
)

// goFuncFlagAsm marks assembly functions (abi.FuncFlagAsm, Go 1.21+);
// goFuncFlagTopFrame the outermost frame of a stack (runtime.goexit,
// mstart, rt0_go: abi.FuncFlagTopFrame), where a walk ends.
const (
	goFuncFlagTopFrame = 1 << 0
	goFuncFlagAsm      = 1 << 2
)

// goFrames reads SP deltas from a Go 1.18+ pclntab: Go binaries have no
// .eh_frame, and their .debug_frame (gone with -w) only ever says
// CFA = RSP + N, hiding the frame pointer Go keeps.
type goFrames struct {
	data      []byte
	textStart uint64
	nfunc     int
	quantum   uint64
	functab   []byte // (nfunc+1) pairs of u32 entryoff, funcoff
	funcdata  []byte // pclntab from pclnOffset on
	pctab     []byte
	flagOff   int // offset of _func.flag
	// pcln owns data: a mapped table is unmapped once unreachable, so
	// rows keeps it alive while it reads.
	pcln *gopclntab.Table
}

func newGoFrames(p *gopclntab.Table) (*goFrames, error) {
	d := p.Data
	if len(d) < 72 || d[7] != 8 {
		return nil, fmt.Errorf("pclntab header: %w", errCFI)
	}
	magic := binary.LittleEndian.Uint32(d)
	g := &goFrames{data: d, textStart: p.TextStart, quantum: uint64(d[6]), pcln: p}
	switch magic {
	case 0xfffffff1: // Go 1.20+: _func has startLine
		g.flagOff = 41
	case 0xfffffff0: // Go 1.18, 1.19
		g.flagOff = 37
	default:
		return nil, fmt.Errorf("pclntab magic %#x older than Go 1.18: %w", magic, errCFI)
	}
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(d[8+8*i:]) }
	g.nfunc = int(word(0))
	pctabOff, pclnOff := word(6), word(7)
	if pctabOff >= uint64(len(d)) || pclnOff >= uint64(len(d)) {
		return nil, fmt.Errorf("pclntab offsets: %w", errCFI)
	}
	g.pctab = d[pctabOff:]
	g.funcdata = d[pclnOff:]
	if uint64(len(g.funcdata)) < uint64(g.nfunc+1)*8 {
		return nil, fmt.Errorf("pclntab functab: %w", errCFI)
	}
	g.functab = g.funcdata[:(g.nfunc+1)*8]
	return g, nil
}

// rows returns the rules of the Go function containing pc. ok is false
// when pc is outside Go text.
//
// The SP delta alone cannot tell whether RBP is set up, so the rule
// relies on the Go amd64 prologue "PUSHQ BP; MOVQ SP, BP" (3 bytes) and
// epilogue "POPQ BP; RET": delta 0 means no frame (CFA = RSP+8); the
// first range with delta 8 after delta 0 is the PUSHQ..MOVQ window
// (RSP+16 for the 3-byte MOVQ, then RBP+16); every other delta means RBP
// is the frame (CFA = RBP+16). Assembly functions with a nonzero delta
// may not keep a frame pointer, so they are Unknown there.
func (g *goFrames) rows(pc uint64) (start uint64, rows []row, ok bool, err error) {
	defer runtime.KeepAlive(g)
	defer elfmap.Recover(elfmap.Guard(), &ok)
	if pc < g.textStart {
		return 0, nil, false, nil
	}
	off := pc - g.textStart
	entryOff := func(i int) uint64 { return uint64(binary.LittleEndian.Uint32(g.functab[i*8:])) }
	i := sort.Search(g.nfunc, func(i int) bool { return entryOff(i) > off }) - 1
	if i < 0 || off >= entryOff(g.nfunc) {
		return 0, nil, false, nil
	}
	funcOff := uint64(binary.LittleEndian.Uint32(g.functab[i*8+4:]))
	if funcOff+uint64(g.flagOff)+1 > uint64(len(g.funcdata)) {
		return 0, nil, false, fmt.Errorf("go func %d: %w", i, errCFI)
	}
	fn := g.funcdata[funcOff:]
	start = g.textStart + entryOff(i)
	end := g.textStart + entryOff(i+1)
	pcsp := uint64(binary.LittleEndian.Uint32(fn[16:]))
	asm := fn[g.flagOff]&goFuncFlagAsm != 0
	top := fn[g.flagOff]&goFuncFlagTopFrame != 0
	if pcsp == 0 || pcsp >= uint64(len(g.pctab)) {
		return start, []row{{pc: start, rule: Rule{Kind: SPOffset, Offset: 8, Outermost: top}}, {pc: end}}, true, nil
	}
	r := &reader{b: g.pctab, off: int(pcsp)}
	val, cur, prev := int64(-1), start, int64(-1)
	sawPush := false
	add := func(pc uint64, rule Rule) {
		rule.Outermost = top
		if n := len(rows); n > 0 && rows[n-1].rule == rule {
			return
		}
		rows = append(rows, row{pc: pc, rule: rule})
	}
	for first := true; ; first = false {
		uv := r.uleb()
		if uv == 0 && !first {
			break
		}
		if uv&1 != 0 {
			val += int64(^(uv >> 1))
		} else {
			val += int64(uv >> 1)
		}
		next := cur + r.uleb()*g.quantum
		if r.err != nil {
			return 0, nil, false, fmt.Errorf("decode pcsp: %w", r.err)
		}
		switch {
		case val == 0:
			add(cur, Rule{Kind: SPOffset, Offset: 8})
		case val == 8 && prev == 0 && !sawPush:
			sawPush = true
			// PUSHQ BP, then MOVQ SP, BP: the caller's frame pointer
			// is saved at CFA-16 from here on.
			add(cur, Rule{Kind: SPOffset, Offset: 16, FP: FPAtCFA, FPOffset: -16})
			if next > cur+3 {
				add(cur+3, Rule{Kind: FPOffset, Offset: 16, FP: FPAtCFA, FPOffset: -16})
			}
		case asm:
			add(cur, Rule{})
		default:
			add(cur, Rule{Kind: FPOffset, Offset: 16, FP: FPAtCFA, FPOffset: -16})
		}
		prev, cur = val, next
		if cur >= end {
			break
		}
	}
	rows = append(rows, row{pc: end})
	return start, rows, true, nil
}
