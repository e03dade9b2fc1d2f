package symbolize

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
)

// ErrKptrRestricted means /proc/kallsyms shows zero addresses.
var ErrKptrRestricted = errors.New("kernel symbol addresses are hidden: run as root (CAP_SYSLOG) or set sysctl kernel.kptr_restrict=0")

// maxKernelSymbolSize caps how far past its start an address is still
// attributed to a kernel symbol, because kallsyms has no sizes and the gap
// before the next symbol may be large (end of text, module holes).
const maxKernelSymbolSize = 1 << 20

// ksym is one kallsyms line, packed: 200k of them stay small.
type ksym struct {
	addr    uint64
	nameOff uint32
	nameLen uint16 // bit 15 marks a __pfx_ symbol (pfxPrefix is not stored)
	mod     uint16 // index into Kallsyms.modules; bit 15 marks non-text
}

const (
	ksymNotText = 1 << 15
	ksymPfx     = 1 << 15
	// maxKsymName bounds a stored name (the kernel's KSYM_NAME_LEN is 512).
	maxKsymName = ksymPfx - 1
)

// pfxPrefix names the padding before a function on kernels built with
// call padding (FineIBT, call depth tracking): every function X has a
// __pfx_X line just before its own, nearly half of all lines. The two
// share the stored name X.
const pfxPrefix = "__pfx_"

// Kallsyms is a snapshot of the kernel symbol table, sorted by address.
// Modules loaded after the snapshot are not known: reload it when a
// lookup misses often.
type Kallsyms struct {
	syms  []ksym
	names []byte
	// modules[0] is the kernel image; the others are loaded modules.
	modules []Module
}

// Module is the kernel image or a loaded module, as frames name it.
type Module struct {
	// Path is "[kernel.kallsyms]" for the image, "[name]" for a module.
	Path string
	// BuildID is the GNU build ID from /sys, empty when unreadable.
	BuildID string
	// Start and Limit bound the addresses of the module's symbols.
	Start, Limit uint64
}

// LoadKallsyms reads a kallsyms file (normally /proc/kallsyms).
func LoadKallsyms(path string) (*Kallsyms, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open kallsyms: %w", err)
	}
	defer f.Close()
	k, err := parseKallsyms(f)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if id := kernelNoteBuildID("/sys/kernel/notes"); id != "" {
		k.modules[0].BuildID = id
	}
	for i := range k.modules[1:] {
		m := &k.modules[1+i]
		mod := m.Path[1 : len(m.Path)-1]
		m.BuildID = kernelNoteBuildID("/sys/module/" + mod + "/notes/.note.gnu.build-id")
	}
	return k, nil
}

func parseKallsyms(r io.Reader) (*Kallsyms, error) {
	k := &Kallsyms{modules: []Module{{Path: "[kernel.kallsyms]"}}}
	mods := map[string]uint16{}
	k.syms = make([]ksym, 0, 1<<17)
	k.names = make([]byte, 0, 4<<20)
	nonzero := false
	var pfx ksym // the previous line, when it was a __pfx_ symbol
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256<<10), 1<<20) // big reads: each read of /proc/kallsyms is costly
	for sc.Scan() {
		// "ffffffff81000000 T _stext" or "... t name\t[module]"
		line := sc.Bytes()
		addr, typ, name, module, ok := splitKallsymsLine(line)
		if !ok {
			return nil, fmt.Errorf("bad kallsyms line %q: %w", line, errBadKallsyms)
		}
		nonzero = nonzero || addr != 0
		var mod uint16
		if len(module) > 0 {
			idx, ok := mods[string(module)]
			if !ok {
				idx = uint16(len(k.modules))
				mods[string(module)] = idx
				k.modules = append(k.modules, Module{Path: "[" + string(module) + "]"})
			}
			mod = idx
		}
		switch typ {
		case 't', 'T', 'w', 'W':
		default:
			mod |= ksymNotText
		}
		var flags uint16
		if bytes.HasPrefix(name, []byte(pfxPrefix)) && len(name) > len(pfxPrefix) {
			name, flags = name[len(pfxPrefix):], ksymPfx
		}
		name = name[:min(len(name), maxKsymName)]
		off := uint32(len(k.names))
		if flags == 0 && pfx.nameLen&^ksymPfx == uint16(len(name)) && bytes.Equal(k.names[pfx.nameOff:int(pfx.nameOff)+len(name)], name) {
			off = pfx.nameOff // X after __pfx_X
		} else {
			k.names = append(k.names, name...)
		}
		s := ksym{addr: addr, nameOff: off, nameLen: uint16(len(name)) | flags, mod: mod}
		k.syms = append(k.syms, s)
		pfx = ksym{}
		if flags != 0 {
			pfx = s
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read kallsyms: %w", err)
	}
	if len(k.syms) == 0 {
		return nil, errors.New("read kallsyms: no symbols")
	}
	if !nonzero {
		return nil, ErrKptrRestricted
	}
	// The tables live as long as the agent: drop the headroom of the
	// initial capacities (a quarter of the names' 4 MiB here).
	k.syms = append(make([]ksym, 0, len(k.syms)), k.syms...)
	k.names = append(make([]byte, 0, len(k.names)), k.names...)
	byAddr := func(a, b ksym) int { return cmp.Compare(a.addr, b.addr) }
	if !slices.IsSortedFunc(k.syms, byAddr) {
		slices.SortStableFunc(k.syms, byAddr)
	}
	for _, s := range k.syms {
		m := &k.modules[s.mod&^ksymNotText]
		if m.Start == 0 || s.addr < m.Start {
			m.Start = s.addr
		}
		m.Limit = max(m.Limit, s.addr+1)
	}
	return k, nil
}

// errBadKallsyms marks a line that is not "ADDR TYPE NAME [MODULE]".
var errBadKallsyms = errors.New("malformed kallsyms")

// splitKallsymsLine parses one line without allocating: kallsyms has
// over 100k lines and is reread when modules change.
func splitKallsymsLine(line []byte) (addr uint64, typ byte, name, module []byte, ok bool) {
	i := 0
	for ; i < len(line) && line[i] != ' '; i++ {
		c := line[i]
		switch {
		case c >= '0' && c <= '9':
			addr = addr<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			addr = addr<<4 | uint64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			addr = addr<<4 | uint64(c-'A'+10)
		default:
			return 0, 0, nil, nil, false
		}
	}
	if i == 0 || i > 16 || i+3 >= len(line) || line[i+2] != ' ' {
		return 0, 0, nil, nil, false
	}
	typ = line[i+1]
	rest := line[i+3:]
	if j := bytes.IndexAny(rest, "\t "); j >= 0 {
		name, module = rest[:j], bytes.TrimSpace(rest[j:])
		if len(module) < 3 || module[0] != '[' || module[len(module)-1] != ']' {
			return 0, 0, nil, nil, false
		}
		module = module[1 : len(module)-1]
	} else {
		name = rest
	}
	return addr, typ, name, module, len(name) > 0
}

// Len reports the number of symbols.
func (k *Kallsyms) Len() int { return len(k.syms) }

// Lookup returns the kernel function containing addr and its module ("" for
// the kernel image). Without sizes in kallsyms, a symbol is taken to extend
// to the next one, at most maxKernelSymbolSize; addresses that land on
// data symbols are not functions.
func (k *Kallsyms) Lookup(addr uint64) (name, module string, ok bool) {
	s, ok := k.find(addr)
	if !ok {
		return "", "", false
	}
	m := k.modules[s.mod]
	if s.mod != 0 {
		module = m.Path[1 : len(m.Path)-1]
	}
	return k.name(s), module, true
}

// name returns the name of s.
func (k *Kallsyms) name(s ksym) string {
	n := k.names[s.nameOff : s.nameOff+uint32(s.nameLen&^ksymPfx)]
	if s.nameLen&ksymPfx != 0 {
		return pfxPrefix + string(n)
	}
	return string(n)
}

func (k *Kallsyms) find(addr uint64) (ksym, bool) {
	i := sort.Search(len(k.syms), func(i int) bool { return k.syms[i].addr > addr }) - 1
	if i < 0 {
		return ksym{}, false
	}
	// Aliases share an address; the last one sorted wins unless it is data.
	for i > 0 && k.syms[i-1].addr == k.syms[i].addr && k.syms[i].mod&ksymNotText != 0 {
		i--
	}
	s := k.syms[i]
	if s.mod&ksymNotText != 0 || addr-s.addr >= maxKernelSymbolSize {
		return ksym{}, false
	}
	return s, true
}

// Address looks up the address of a kernel symbol by name (linear: meant
// for tests and one-off lookups).
func (k *Kallsyms) Address(name string) (uint64, bool) {
	for _, s := range k.syms {
		if k.name(s) == name {
			return s.addr, true
		}
	}
	return 0, false
}

// Modules returns the kernel image (index 0) and the modules, indexed as
// Resolve names them. The slice is the Kallsyms' own: read it only.
func (k *Kallsyms) Modules() []Module { return k.modules }

// Resolve returns the kernel function containing addr and the index of
// its module in Modules. ok is false when no function holds addr (Lookup);
// module is then 0, the kernel image.
func (k *Kallsyms) Resolve(addr uint64) (name string, module int, ok bool) {
	s, ok := k.find(addr)
	if !ok {
		return "", 0, false
	}
	return k.name(s), int(s.mod), true
}

// kernelNoteBuildID reads the GNU build ID from a raw ELF note file such
// as /sys/kernel/notes.
func kernelNoteBuildID(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	return findBuildID(f, binary.LittleEndian)
}
