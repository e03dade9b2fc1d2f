package symbolize

import (
	"debug/elf"
	"errors"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"

	"github.com/spanprof/spanprof/internal/profile"
)

// Object is one parsed ELF file, shared by every process that maps it.
// It is immutable after parsing except for a demangling memo, and safe for
// concurrent use.
type Object struct {
	id    Identity
	path  string // display path of the first opener
	progs []*elf.Prog
	syms  *symtab
	gotab *goTable

	mu        sync.Mutex
	demangled map[string]string
}

// Symbol is what a lookup finds at one virtual address.
type Symbol struct {
	Function string
	// File and Line are known for Go code (pclntab) only.
	File string
	Line int
}

// Identity returns the build ID or content hash of the object.
func (o *Object) Identity() Identity { return o.id }

// FillMapping copies the object's identity into m, as exporters need it
// for the process.executable.build_id.* mapping attributes.
func (o *Object) FillMapping(m *profile.Mapping) {
	m.BuildID = o.id.BuildID
	m.HTLHash = o.id.HTLHash
}

// IsGo reports whether the object has a Go pclntab.
func (o *Object) IsGo() bool { return o.gotab != nil }

// NumSymbols reports how many function symbols the ELF tables held.
func (o *Object) NumSymbols() int { return o.syms.len() }

// VirtualAddress translates a runtime address of mapping m to an ELF
// virtual address of this object.
func (o *Object) VirtualAddress(m *profile.Mapping, addr uint64) (uint64, bool) {
	return VirtualAddress(o.progs, m, addr)
}

// Lookup symbolizes an ELF virtual address. Go binaries are resolved
// through the pclntab (which has file and line), anything else, and C code
// linked into Go binaries, through .symtab and .dynsym.
func (o *Object) Lookup(vaddr uint64) (Symbol, bool) {
	if o.gotab != nil {
		if fn, file, line, ok := o.gotab.lookup(vaddr); ok {
			return Symbol{Function: fn, File: file, Line: line}, true
		}
	}
	s, ok := o.syms.lookup(vaddr)
	if !ok {
		return Symbol{}, false
	}
	return Symbol{Function: o.demangle(s.name)}, true
}

// Frames appends the frame of runtime address addr in mapping m to dst.
// The frame's Mapping is m itself, so the caller owns the mapping values
// (and should have called FillMapping on it). An address that cannot be
// symbolized still yields a frame with Address and Mapping set, so
// exporters can show module and offset.
func (o *Object) Frames(dst []profile.Frame, m *profile.Mapping, addr uint64) []profile.Frame {
	f := profile.Frame{Address: addr, Mapping: m}
	if vaddr, ok := o.VirtualAddress(m, addr); ok {
		if s, ok := o.Lookup(vaddr); ok {
			f.Function, f.File, f.Line = s.Function, s.File, s.Line
		}
	}
	return append(dst, f)
}

// demangle turns C++ and Rust names into readable ones, memoized because
// the same hot functions are looked up for every sample.
func (o *Object) demangle(name string) string {
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if d, ok := o.demangled[name]; ok {
		return d
	}
	d := demangle.Filter(name, demangle.NoClones)
	if o.demangled == nil {
		o.demangled = make(map[string]string)
	}
	o.demangled[name] = d
	return d
}

// parseObject reads the tables of an opened ELF file. debugDirs are
// searched for a separate debug file when the file has no .symtab.
func parseObject(ef *elf.File, id Identity, openPath, displayPath string, debugDirs []string) (*Object, error) {
	o := &Object{id: id, path: displayPath, progs: ef.Progs}
	files := []*elf.File{ef}
	if ef.Section(".symtab") == nil {
		if df := openDebugFile(ef, id, openPath, displayPath, debugDirs); df != nil {
			defer df.Close()
			files = append(files, df)
		}
	}
	o.syms = newSymtab(files...)
	if pt, err := FindPclntab(ef); err == nil {
		gt, err := newGoTable(pt)
		if err != nil {
			return nil, err
		}
		o.gotab = gt
	} else if !errors.Is(err, ErrNoPclntab) {
		return nil, err
	}
	return o, nil
}

// openDebugFile finds the separate debug file of a stripped binary, the
// way gdb does: by build ID under <dir>/.build-id/xx/rest.debug, then by
// .gnu_debuglink next to the file, in its .debug directory and under
// <dir>/<original directory>.
func openDebugFile(ef *elf.File, id Identity, openPath, displayPath string, debugDirs []string) *elf.File {
	var cands []string
	if len(id.BuildID) > 2 {
		for _, d := range debugDirs {
			cands = append(cands, filepath.Join(d, ".build-id", id.BuildID[:2], id.BuildID[2:]+".debug"))
		}
	}
	if link := debugLink(ef); link != "" {
		cands = append(cands,
			filepath.Join(filepath.Dir(openPath), link),
			filepath.Join(filepath.Dir(openPath), ".debug", link))
		for _, d := range debugDirs {
			cands = append(cands, filepath.Join(d, filepath.Dir(displayPath), link))
		}
	}
	for _, c := range cands {
		if c == openPath {
			continue
		}
		df, err := elf.Open(c)
		if err != nil {
			continue
		}
		if id.BuildID != "" && BuildID(df) != id.BuildID {
			df.Close()
			continue
		}
		return df
	}
	return nil
}

// debugLink returns the file name stored in .gnu_debuglink.
func debugLink(ef *elf.File) string {
	s := ef.Section(".gnu_debuglink")
	if s == nil {
		return ""
	}
	d, err := s.Data()
	if err != nil {
		return ""
	}
	if i := strings.IndexByte(string(d), 0); i > 0 {
		return string(d[:i])
	}
	return ""
}
