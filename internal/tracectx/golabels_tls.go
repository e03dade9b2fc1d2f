package tracectx

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// goInternalTLSG is where an internally linked linux/amd64 Go binary keeps
// g: the word just below the thread pointer. Such binaries have no PT_TLS
// segment; the runtime's settls points fsbase 8 bytes past m.tls[0].
const goInternalTLSG = -8

// goTLSG returns the offset of the current g from fsbase. With a symbol
// table and a PT_TLS segment (external linking, i.e. cgo) it is where the
// system linker put runtime.tlsg: st_value - roundup(p_memsz, p_align), the
// x86-64 variant II static TLS offset of the executable's block. Without
// PT_TLS it is -8. When the symbol is gone (-s) but PT_TLS exists, the
// offset is read from the runtime's own code: every ABI0→ABIInternal
// wrapper loads g with "mov %fs:disp32, %r14".
func goTLSG(f *elf.File) (int64, string, error) {
	tls := goTLSProg(f)
	if tls == nil {
		return goInternalTLSG, "fixed", nil
	}
	if off, err := goTLSGFromSymtab(f, tls); err == nil {
		return off, "symtab", nil
	}
	off, err := goTLSGFromCode(f)
	if err != nil {
		return 0, "", err
	}
	return off, "code", nil
}

func goTLSProg(f *elf.File) *elf.Prog {
	for _, p := range f.Progs {
		if p.Type == elf.PT_TLS {
			return p
		}
	}
	return nil
}

var errNoTLSG = errors.New("runtime.tlsg not in symbol table")

func goTLSGFromSymtab(f *elf.File, tls *elf.Prog) (int64, error) {
	syms, err := f.Symbols()
	if err != nil {
		return 0, fmt.Errorf("read symtab: %w", errNoTLSG)
	}
	for _, s := range syms {
		if s.Name == "runtime.tlsg" && elf.ST_TYPE(s.Info) == elf.STT_TLS {
			align := tls.Align
			if align == 0 {
				align = 1
			}
			return int64(s.Value) - int64(roundUp(tls.Memsz, align)), nil
		}
	}
	return 0, errNoTLSG
}

// goTLSGInsn is the length of "mov %fs:disp32, %r14", and goTLSGChunk how
// much of a section goTLSGFromCode reads at a time.
const (
	goTLSGInsn  = 9
	goTLSGChunk = 256 << 10
)

// goTLSGVote adds to votes the displacement of every "mov %fs:disp32,
// %r14" in data with a negative one, and returns the first to reach want.
func goTLSGVote(data []byte, votes map[int32]int, want int) (int32, bool) {
	pattern := [...]byte{0x64, 0x4c, 0x8b, 0x34, 0x25}
	for i := 0; i+goTLSGInsn <= len(data); i++ {
		if data[i] != pattern[0] || data[i+1] != pattern[1] || data[i+2] != pattern[2] ||
			data[i+3] != pattern[3] || data[i+4] != pattern[4] {
			continue
		}
		disp := int32(binary.LittleEndian.Uint32(data[i+5:]))
		if disp >= 0 || disp < -4096 {
			continue
		}
		votes[disp]++
		if votes[disp] >= want {
			return disp, true
		}
	}
	return 0, false
}

// goTLSGScan votes (goTLSGVote) over r, read chunk bytes at a time (a
// program's text can be tens of MiB, and the votes are usually in by its
// first wrappers), with an instruction across two chunks counted once.
func goTLSGScan(r io.Reader, votes map[int32]int, want, chunk int) (int32, bool, error) {
	buf := make([]byte, chunk+goTLSGInsn-1)
	kept := 0 // the last chunk's tail, where an instruction may start
	for {
		n, err := io.ReadFull(r, buf[kept:kept+chunk])
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return 0, false, err
		}
		data := buf[:kept+n]
		if disp, ok := goTLSGVote(data, votes, want); ok {
			return disp, true, nil
		}
		if err != nil {
			return 0, false, nil
		}
		// goTLSGVote counted every instruction that starts before the
		// last goTLSGInsn-1 bytes.
		kept = min(len(data), goTLSGInsn-1)
		copy(buf, data[len(data)-kept:])
	}
}

// goTLSGFromCode scans executable sections for "mov %fs:disp32, %r14"
// (64 4c 8b 34 25 disp32) with a negative displacement and returns the
// displacement once it has seen it goTLSGVotes times, or the most frequent
// one at the end. Go code emits that load in hundreds of places; C code
// linked in by cgo addresses its TLS through other registers.
func goTLSGFromCode(f *elf.File) (int64, error) {
	const goTLSGVotes = 16
	votes := map[int32]int{}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		disp, ok, err := goTLSGScan(s.Open(), votes, goTLSGVotes, goTLSGChunk)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", s.Name, err)
		}
		if ok {
			return int64(disp), nil
		}
	}
	best, n := int32(0), 0
	for d, c := range votes {
		if c > n {
			best, n = d, c
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("find g's TLS slot: no runtime.tlsg and no fs-relative load of g: %w", ErrUnsupportedGo)
	}
	return int64(best), nil
}
