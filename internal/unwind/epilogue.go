package unwind

// MaxEpilogue is how many bytes of code EpilogueRule reads at most.
const MaxEpilogue = 32

// EpilogueRule returns the rule at the instruction code starts with, when
// the code from there runs straight to a return: only stack-pointer
// additions (add $imm, %rsp), pops and a final ret, as in CPython's perf
// trampolines after their call (add $8, %rsp; ret), or a frame-pointer
// epilogue (pop %rbp; ret, or leave; ret). Such a run has one way through,
// so the CFA at its first instruction is exact: rsp plus what it adds and
// pops, plus the return address. Any other instruction (a branch, a
// memory access, a move) and ok is false: no rule is guessed for code
// without a table.
func EpilogueRule(code []byte) (r Rule, ok bool) {
	var off int64 // bytes the run adds to rsp before the ret
	fpAt := int64(-1)
	leave := false
	for i := 0; i < len(code) && i < MaxEpilogue; {
		b := code[i]
		switch {
		case b == 0xc3: // ret
			if leave {
				// leave: rsp = rbp, pop rbp. The CFA is rbp-based.
				return Rule{Kind: FPOffset, Offset: off + 8, FP: FPAtCFA, FPOffset: -(off + 8)}, true
			}
			r = Rule{Kind: SPOffset, Offset: off + 8}
			if fpAt >= 0 {
				r.FP, r.FPOffset = FPAtCFA, fpAt-(off+8)
			}
			return r, true
		case b == 0xc9 && off == 0 && fpAt < 0 && !leave: // leave
			leave, off, fpAt = true, 8, 0
			i++
		case b == 0x5d && !leave: // pop %rbp
			fpAt = off
			off += 8
			i++
		case b >= 0x58 && b <= 0x5f && !leave: // pop another register
			off += 8
			i++
		case b == 0x41 && i+1 < len(code) && code[i+1] >= 0x58 && code[i+1] <= 0x5f && !leave: // pop %r8-%r15
			off += 8
			i += 2
		case b == 0x48 && i+3 < len(code) && code[i+1] == 0x83 && code[i+2] == 0xc4 && !leave && fpAt < 0: // add $imm8, %rsp
			n := int64(int8(code[i+3]))
			if n <= 0 || n%8 != 0 {
				return Rule{}, false
			}
			off += n
			i += 4
		case b == 0x48 && i+6 < len(code) && code[i+1] == 0x81 && code[i+2] == 0xc4 && !leave && fpAt < 0: // add $imm32, %rsp
			n := int64(int32(uint32(code[i+3]) | uint32(code[i+4])<<8 | uint32(code[i+5])<<16 | uint32(code[i+6])<<24))
			if n <= 0 || n%8 != 0 {
				return Rule{}, false
			}
			off += n
			i += 7
		default:
			return Rule{}, false
		}
	}
	return Rule{}, false
}
