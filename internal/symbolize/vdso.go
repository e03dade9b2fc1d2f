package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// atSysinfoEhdr is the auxiliary vector's key for the vDSO's address.
const atSysinfoEhdr = 33

// VDSO is the kernel's vDSO, copied from the agent's own address space:
// every 64-bit process of one kernel maps the same image, so its symbols
// (.dynsym: clock_gettime, gettimeofday, ...) name the [vdso] frames of any
// of them, live or exited. The copy lives in a memfd so the symbolizer
// opens it like any other ELF file.
type VDSO struct {
	f    *os.File
	size uint64
}

// SelfVDSO returns the copy of this process's vDSO, made at the first call
// and kept for the life of the process (one memfd): the image never
// changes while the kernel runs.
var SelfVDSO = sync.OnceValues(LoadVDSO)

// LoadVDSO copies the vDSO of this process, found through the auxiliary
// vector's AT_SYSINFO_EHDR and sized by its [vdso] line in
// /proc/self/maps, and checks that it parses as ELF.
func LoadVDSO() (*VDSO, error) {
	auxv, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return nil, fmt.Errorf("read auxv: %w", err)
	}
	base := auxvValue(auxv, atSysinfoEhdr)
	if base == 0 {
		return nil, errors.New("no vDSO in the auxiliary vector")
	}
	size, err := vdsoSize(base)
	if err != nil {
		return nil, err
	}
	image := make([]byte, size)
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return nil, fmt.Errorf("open own memory: %w", err)
	}
	_, err = mem.ReadAt(image, int64(base))
	mem.Close()
	if err != nil {
		return nil, fmt.Errorf("read vDSO: %w", err)
	}
	if _, err := elf.NewFile(bytes.NewReader(image)); err != nil {
		return nil, fmt.Errorf("parse vDSO: %w", err)
	}
	fd, err := unix.MemfdCreate("spanprof-vdso", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create memfd for the vDSO: %w", err)
	}
	f := os.NewFile(uintptr(fd), "vdso")
	if _, err := f.Write(image); err != nil {
		f.Close()
		return nil, fmt.Errorf("write vDSO: %w", err)
	}
	return &VDSO{f: f, size: size}, nil
}

// auxvValue returns the value of key in a 64-bit auxiliary vector, 0 when
// absent.
func auxvValue(auxv []byte, key uint64) uint64 {
	for i := 0; i+16 <= len(auxv); i += 16 {
		k := binary.LittleEndian.Uint64(auxv[i:])
		if k == 0 {
			break
		}
		if k == key {
			return binary.LittleEndian.Uint64(auxv[i+8:])
		}
	}
	return 0
}

// vdsoSize returns the size of the [vdso] mapping starting at base.
func vdsoSize(base uint64) (uint64, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("read own maps: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasSuffix(line, "[vdso]") {
			continue
		}
		lo, rest, _ := strings.Cut(line, "-")
		hi, _, _ := strings.Cut(rest, " ")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && start == base && end > start {
			return end - start, nil
		}
	}
	return 0, fmt.Errorf("no [vdso] mapping at %#x in /proc/self/maps", base)
}

// Path is where the symbolizer can open the image.
func (v *VDSO) Path() string { return fmt.Sprintf("/proc/self/fd/%d", v.f.Fd()) }

// Covers reports whether a [vdso] mapping from start to end is this image:
// a 64-bit process's, mapped above 4 GiB with the image's size. A 32-bit
// process (below 4 GiB) maps the kernel's other, 32-bit vDSO.
func (v *VDSO) Covers(start, end uint64) bool {
	return v != nil && start >= 1<<32 && end-start == v.size
}

// Close releases the copy.
func (v *VDSO) Close() error {
	if v == nil {
		return nil
	}
	return v.f.Close()
}
