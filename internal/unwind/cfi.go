package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// errCFI wraps malformed call-frame information.
var errCFI = errors.New("malformed call frame information")

// Pointer encodings (DW_EH_PE_*) of .eh_frame.
const (
	peAbsptr  = 0x00
	peUleb128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSleb128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePcrel   = 0x10
	peDatarel = 0x30
	peOmit    = 0xff
)

// reader decodes little-endian DWARF data. An overrun sets err and makes
// every later read return zero, so parsers check once at the end.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("read past end at %d: %w", r.off, errCFI)
	}
	r.off = len(r.b)
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || r.off+n > len(r.b) {
		r.fail()
		return make([]byte, max(n, 0))
	}
	v := r.b[r.off : r.off+n]
	r.off += n
	return v
}

func (r *reader) u8() uint8   { return r.bytes(1)[0] }
func (r *reader) u16() uint16 { return binary.LittleEndian.Uint16(r.bytes(2)) }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.bytes(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.bytes(8)) }

func (r *reader) uleb() uint64 {
	var v uint64
	for shift := 0; ; shift += 7 {
		b := r.u8()
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 || r.err != nil {
			return v
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	shift := 0
	for {
		b := r.u8()
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 || r.err != nil {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *reader) cstring() string {
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail()
	return ""
}

// pointer reads a value in encoding enc; base is the virtual address of
// r.b[0], for pc-relative values. Indirect pointers are not followed:
// callers only use them for personality routines.
func (r *reader) pointer(enc uint8, base, dataBase uint64) uint64 {
	if enc == peOmit {
		return 0
	}
	pos := base + uint64(r.off)
	var v uint64
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		v = r.u64()
	case peUleb128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peSleb128:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	default:
		r.err = fmt.Errorf("pointer encoding %#x: %w", enc, errCFI)
		return 0
	}
	switch enc & 0x70 {
	case pePcrel:
		v += pos
	case peDatarel:
		v += dataBase
	}
	return v
}

// cie is a Common Information Entry.
type cie struct {
	codeAlign uint64
	dataAlign int64
	fdeEnc    uint8
	hasAug    bool // 'z': FDEs carry an augmentation length
	initial   []byte
}

// parseCIE decodes the CIE whose content (after length and id) is r.b[r.off:].
func parseCIE(r *reader, debugFrame bool) (*cie, error) {
	c := &cie{fdeEnc: peAbsptr}
	version := r.u8()
	aug := r.cstring()
	if debugFrame && version >= 4 {
		r.u8() // address_size
		r.u8() // segment_selector_size
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		r.u8()
	} else {
		r.uleb()
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.hasAug = true
		n := r.uleb()
		end := r.off + int(n)
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.fdeEnc = r.u8()
			case 'L':
				r.u8()
			case 'P':
				enc := r.u8()
				r.pointer(enc&^0x80, 0, 0)
			}
		}
		if end > len(r.b) {
			r.fail()
		} else {
			r.off = end
		}
	} else if aug != "" && aug != "eh" {
		return nil, fmt.Errorf("augmentation %q: %w", aug, errCFI)
	}
	c.initial = r.b[r.off:]
	return c, r.err
}

// state is the part of a CFI row spanprof needs: the CFA rule, where the
// caller's frame pointer is, and whether the return address is
// undefined.
type state struct {
	reg     uint64
	offset  int64
	expr    bool
	fp      FPSave
	fpOff   int64
	raUndef bool
	// ra and raOff: where the return address is (Arch.LR).
	ra    RASave
	raOff int64
	// plt is the PLT rule's threshold (pltExpression), 0 for none.
	plt uint8
}

func (s state) rule(a Arch) Rule {
	var r Rule
	switch {
	case s.expr:
	case s.reg == a.SP:
		r = Rule{Kind: SPOffset, Offset: s.offset, plt: s.plt}
	case s.reg == a.FP:
		r = Rule{Kind: FPOffset, Offset: s.offset}
	}
	r.FP, r.Outermost = s.fp, s.raUndef
	if s.fp == FPAtCFA {
		r.FPOffset = s.fpOff
	}
	if a.LR {
		r.RA = s.ra
		if s.ra == RAAtCFA {
			r.RAOffset = s.raOff
		}
	}
	return r
}

// setReg applies a register rule: only the frame pointer's and the return
// address's matter to the walk. how is FPAtCFA (at CFA+off), FPSame
// (same_value, restore to a CIE without a rule) or FPLost (any other
// rule); undefined marks the return address undefined.
func (s *state) setReg(a Arch, reg uint64, how FPSave, off int64, undefined bool) {
	switch reg {
	case a.FP:
		s.fp, s.fpOff = how, off
		if how != FPAtCFA {
			s.fpOff = 0
		}
	case a.RA:
		s.raUndef = undefined
		if a.LR {
			// The register rule of the link register is the return
			// address's: FPAtCFA saved, FPSame still in x30.
			s.ra, s.raOff = RALost, 0
			switch {
			case how == FPAtCFA:
				s.ra, s.raOff = RAAtCFA, off
			case how == FPSame && !undefined:
				s.ra = RAInLR
			}
		}
	}
}

// row is the rule from pc up to the next row's pc.
type row struct {
	pc   uint64
	rule Rule
}

// execute runs the CIE's initial instructions and then the FDE's, and
// returns the rows of the function starting at start. It tracks the CFA,
// the frame pointer's rule and whether the return address is undefined;
// other registers do not change where the caller's frame lies.
func execute(a Arch, c *cie, fdeInsns []byte, start uint64) ([]row, error) {
	var (
		cur     state
		initial state // after the CIE's instructions, for DW_CFA_restore
		stack   []state
		pc      = start
		rows    []row
	)
	restore := func(reg uint64) {
		switch reg {
		case a.FP:
			cur.fp, cur.fpOff = initial.fp, initial.fpOff
		case a.RA:
			cur.raUndef, cur.ra, cur.raOff = initial.raUndef, initial.ra, initial.raOff
		}
	}
	emit := func() {
		r := cur.rule(a)
		if n := len(rows); n > 0 && rows[n-1].pc == pc {
			rows[n-1].rule = r
			return
		}
		if n := len(rows); n > 0 && rows[n-1].rule == r {
			return
		}
		rows = append(rows, row{pc: pc, rule: r})
	}
	run := func(insns []byte) error {
		r := &reader{b: insns}
		for r.off < len(r.b) && r.err == nil {
			op := r.u8()
			switch op >> 6 {
			case 1: // DW_CFA_advance_loc
				pc += uint64(op&0x3f) * c.codeAlign
				emit()
				continue
			case 2: // DW_CFA_offset
				cur.setReg(a, uint64(op&0x3f), FPAtCFA, int64(r.uleb())*c.dataAlign, false)
				emit()
				continue
			case 3: // DW_CFA_restore
				restore(uint64(op & 0x3f))
				emit()
				continue
			}
			switch op {
			case 0x00: // nop
			case 0x01: // set_loc
				pc = r.pointer(c.fdeEnc, 0, 0)
				emit()
			case 0x02:
				pc += uint64(r.u8()) * c.codeAlign
				emit()
			case 0x03:
				pc += uint64(r.u16()) * c.codeAlign
				emit()
			case 0x04:
				pc += uint64(r.u32()) * c.codeAlign
				emit()
			case 0x05: // offset_extended
				reg := r.uleb()
				cur.setReg(a, reg, FPAtCFA, int64(r.uleb())*c.dataAlign, false)
				emit()
			case 0x09, 0x14: // register, val_offset
				reg := r.uleb()
				r.uleb()
				cur.setReg(a, reg, FPLost, 0, false)
				emit()
			case 0x2f: // GNU_negative_offset_extended
				reg := r.uleb()
				cur.setReg(a, reg, FPAtCFA, -int64(r.uleb())*c.dataAlign, false)
				emit()
			case 0x06: // restore_extended
				restore(r.uleb())
				emit()
			case 0x07: // undefined
				cur.setReg(a, r.uleb(), FPLost, 0, true)
				emit()
			case 0x08: // same_value
				cur.setReg(a, r.uleb(), FPSame, 0, false)
				emit()
			case 0x2e: // GNU_args_size
				r.uleb()
			case 0x2d: // AArch64: negate_ra_state (SPARC's GNU_window_save)
				if !a.LR {
					return fmt.Errorf("call frame instruction %#x: %w", op, errCFI)
				}
				// The return address is signed from here on, or no
				// longer: the walk strips the authentication code of
				// every return address (Stack.PACMask) either way.
			case 0x0a: // remember_state
				stack = append(stack, cur)
			case 0x0b: // restore_state
				if len(stack) == 0 {
					return fmt.Errorf("restore_state with empty stack: %w", errCFI)
				}
				cur = stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				emit()
			case 0x0c: // def_cfa
				cur.reg, cur.offset, cur.expr, cur.plt = r.uleb(), int64(r.uleb()), false, 0
				emit()
			case 0x0d: // def_cfa_register
				cur.reg, cur.expr, cur.plt = r.uleb(), false, 0
				emit()
			case 0x0e: // def_cfa_offset
				cur.offset = int64(r.uleb())
				emit()
			case 0x0f: // def_cfa_expression
				e := r.bytes(int(r.uleb()))
				cur.expr, cur.plt = true, 0
				if off, k, ok := pltExpression(a, e); ok {
					cur.reg, cur.offset, cur.expr, cur.plt = a.SP, off, false, k
				}
				emit()
			case 0x10, 0x16: // expression, val_expression
				reg := r.uleb()
				r.bytes(int(r.uleb()))
				cur.setReg(a, reg, FPLost, 0, false)
				emit()
			case 0x11: // offset_extended_sf
				reg := r.uleb()
				cur.setReg(a, reg, FPAtCFA, r.sleb()*c.dataAlign, false)
				emit()
			case 0x15: // val_offset_sf
				reg := r.uleb()
				r.sleb()
				cur.setReg(a, reg, FPLost, 0, false)
				emit()
			case 0x12: // def_cfa_sf
				cur.reg, cur.offset, cur.expr, cur.plt = r.uleb(), r.sleb()*c.dataAlign, false, 0
				emit()
			case 0x13: // def_cfa_offset_sf
				cur.offset = r.sleb() * c.dataAlign
				emit()
			default:
				return fmt.Errorf("call frame instruction %#x: %w", op, errCFI)
			}
		}
		return r.err
	}
	if a.LR {
		// DWARF's default for a callee-saved register, x30 included:
		// until a rule says otherwise the return address is in it.
		cur.ra = RAInLR
	}
	if err := run(c.initial); err != nil {
		return nil, fmt.Errorf("run CIE instructions: %w", err)
	}
	initial = cur
	pc = start
	rows = rows[:0]
	emit()
	if err := run(fdeInsns); err != nil {
		return nil, fmt.Errorf("run FDE instructions: %w", err)
	}
	return rows, nil
}

// pltExpression recognizes the CFA expression linkers write for a lazy
// PLT, whose 16-byte entries push one word from their 11th (or 10th)
// byte on:
//
//	DW_OP_breg7 (rsp) N; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
//	DW_OP_litK; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
//
// which is CFA = rsp + N + 8 * ((rip & 15) >= K). It returns N and K.
// A sample in a PLT stub (every call into a shared library passes one)
// would otherwise lose the caller.
func pltExpression(a Arch, e []byte) (offset int64, k uint8, ok bool) {
	const (
		opBreg0 = 0x70
		opLit0  = 0x30
		opAnd   = 0x1a
		opGe    = 0x2a
		opShl   = 0x24
		opPlus  = 0x22
	)
	r := &reader{b: e}
	if r.u8() != opBreg0+uint8(a.SP) {
		return 0, 0, false
	}
	offset = r.sleb()
	if r.u8() != opBreg0+uint8(a.RA) || r.sleb() != 0 || r.u8() != opLit0+15 || r.u8() != opAnd {
		return 0, 0, false
	}
	lit := r.u8()
	if lit < opLit0+1 || lit > opLit0+15 {
		return 0, 0, false
	}
	if r.u8() != opGe || r.u8() != opLit0+3 || r.u8() != opShl || r.u8() != opPlus || r.err != nil || r.off != len(e) {
		return 0, 0, false
	}
	return offset, lit - opLit0, true
}
