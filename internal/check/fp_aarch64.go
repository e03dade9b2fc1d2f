package check

import (
	"encoding/binary"

	"golang.org/x/arch/arm64/arm64asm"
)

// scanAArch64 reports whether an AArch64 function body sets up a frame
// record and whether it calls anything. A frame record is x29 and x30
// stored as a pair relative to sp, then x29 pointed at it: `stp x29, x30,
// [sp, #-N]!` + `mov x29, sp` (GCC, clang for small frames), or `sub sp,
// sp, #N` + `stp x29, x30, [sp, #k]` + `add x29, sp, #k` (clang). The
// `paciasp` and `bti c` hints before them decode as HINT and change
// nothing. GCC without frame pointers saves x30 alone (`str x30, [sp,
// #-16]!`) or pairs x29 with it without pointing x29 at the pair: no frame.
func scanAArch64(body []byte) (frame, call bool) {
	stored := false
	for off := 0; off+4 <= len(body) && !(frame && call); off += 4 {
		if isAuthCall(binary.LittleEndian.Uint32(body[off:])) {
			call = true
			continue
		}
		inst, err := arm64asm.Decode(body[off:])
		if err != nil {
			continue
		}
		switch inst.Op {
		case arm64asm.STP:
			if inst.Args[0] == arm64asm.X29 && inst.Args[1] == arm64asm.X30 {
				if m, ok := inst.Args[2].(arm64asm.MemImmediate); ok && m.Base == arm64asm.RegSP(arm64asm.SP) {
					stored = true
				}
			}
		case arm64asm.MOV, arm64asm.ADD:
			if stored && inst.Args[0] == arm64asm.RegSP(arm64asm.X29) && inst.Args[1] == arm64asm.RegSP(arm64asm.SP) {
				frame = true
			}
		case arm64asm.BL, arm64asm.BLR:
			call = true
		}
	}
	return frame, call
}

// isAuthCall recognises the pointer-authenticating register calls (BLRAA,
// BLRAAZ, BLRAB, BLRABZ), which the decoder does not know: 1101011 Z 0 0
// 1 11111 0000 1 M Rn Rm.
func isAuthCall(w uint32) bool { return w&0xfefff800 == 0xd63f0800 }
