package proc

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
)

// Image is where an exec put the new program, as the kernel reports it at
// the exec: enough to lay out the executable's and its interpreter's code
// from their ELF headers when the process is gone before /proc/PID/maps
// can be read (a process living a millisecond). It has the fields of the
// sampler's ExecImage, in its order, so one converts to the other.
type Image struct {
	// Path is the file executed as the process saw it (for a script, its
	// interpreter); Dev and Inode name that file.
	Path  string
	Dev   string // "major:minor" in hex, as /proc/PID/maps shows it
	Inode uint64
	// Entry is the auxiliary vector's AT_ENTRY: the executable's load
	// bias plus its ELF entry point. InterpBase is AT_BASE: the dynamic
	// loader's load bias, 0 for a static executable.
	Entry, InterpBase uint64
	// InterpDev and InterpInode name the file mapped at InterpBase; the
	// loader is placed only when they are known (the same path can name
	// another file in the agent's mount namespace).
	InterpDev   string
	InterpInode uint64
}

// synthesize builds the process from its exec image: the executable
// segments of the executable and of its interpreter, placed by the load
// biases the kernel reported. The files are found among those the tracker
// holds for other processes (a short-lived child runs what its siblings
// and parent map), else opened by path and checked to be the inode that
// was executed. Callers hold t.mu.
func (t *Tracker) synthesize(pid uint32, img *Image) (*Process, error) {
	if img == nil || img.Path == "" || img.Inode == 0 {
		return nil, fmt.Errorf("no exec image")
	}
	p := &Process{PID: pid, Exe: img.Path, Files: map[uint64]*os.File{}, Exited: true, Partial: true}
	exeKey := fileKey{dev: img.Dev, inode: img.Inode}
	exe, ok := t.shared(exeKey, img.Path)
	if !ok {
		return nil, fmt.Errorf("executable %s (inode %d) not found", img.Path, img.Inode)
	}
	eh := t.header(exeKey)
	if eh.err != nil {
		t.unref(exe)
		return nil, fmt.Errorf("executable %s: %w", img.Path, eh.err)
	}
	bias := uint64(0)
	if eh.typ == elf.ET_DYN {
		if img.Entry == 0 {
			t.unref(exe)
			return nil, fmt.Errorf("executable %s: no AT_ENTRY to place it", img.Path)
		}
		bias = img.Entry - eh.entry
	}
	t.place(p, exe, eh.code, bias, img.Path, img.Dev, img.Inode)
	if eh.interp != "" && img.InterpBase != 0 && img.InterpInode != 0 {
		key := fileKey{dev: img.InterpDev, inode: img.InterpInode}
		if f, ok := t.shared(key, eh.interp); ok {
			if lh := t.header(key); lh.err == nil {
				t.place(p, f, lh.code, img.InterpBase, eh.interp, key.dev, key.inode)
			} else {
				t.unref(f)
			}
		}
	}
	SortMappings(p.Mappings)
	return p, nil
}

// elfHeader is what placing a file's code from an exec needs of its ELF
// headers, parsed once per file the tracker shares: a process that lives
// a millisecond runs what its siblings ran, and parsing the headers again
// for each was a tenth of the agent's work under churn.
type elfHeader struct {
	typ    elf.Type
	entry  uint64
	code   []elf.ProgHeader // the executable PT_LOAD segments
	interp string           // PT_INTERP, "" for none
	err    error
}

// header returns the ELF headers of the shared file key, parsing them at
// the first call. Callers hold t.mu and a reference to key's file.
func (t *Tracker) header(key fileKey) *elfHeader {
	sf := t.files[key]
	if sf.hdr != nil {
		return sf.hdr
	}
	h := &elfHeader{}
	ef, err := elf.NewFile(sf.f)
	if err != nil {
		h.err = err
	} else {
		h.typ, h.entry, h.interp = ef.Type, ef.Entry, interpreter(ef)
		for _, ph := range ef.Progs {
			if ph.Type == elf.PT_LOAD && ph.Flags&elf.PF_X != 0 && ph.Memsz != 0 {
				h.code = append(h.code, ph.ProgHeader)
			}
		}
	}
	sf.hdr = h
	return h
}

// place adds the executable PT_LOAD segments code of f, loaded at bias, to
// p, with one reference to f per mapping it adds.
func (t *Tracker) place(p *Process, f *os.File, code []elf.ProgHeader, bias uint64, path, dev string, inode uint64) {
	const page = 4096
	added := 0
	for _, ph := range code {
		start := (bias + ph.Vaddr) &^ (page - 1)
		end := (bias + ph.Vaddr + ph.Memsz + page - 1) &^ (page - 1)
		m := Mapping{Start: start, End: end, Offset: ph.Off &^ (page - 1), Dev: dev, Inode: inode, Path: path}
		p.Mappings = append(p.Mappings, m)
		if added > 0 {
			t.hold(fileKey{dev: dev, inode: inode})
		}
		p.Files[start] = f
		added++
	}
	if added == 0 {
		t.unref(f)
	}
}

// interpreter returns the PT_INTERP path of ef, or "".
func interpreter(ef *elf.File) string {
	for _, ph := range ef.Progs {
		if ph.Type == elf.PT_INTERP {
			b := make([]byte, ph.Filesz)
			if _, err := ph.ReadAt(b, 0); err != nil {
				return ""
			}
			if i := len(b) - 1; i >= 0 && b[i] == 0 {
				b = b[:i]
			}
			return string(b)
		}
	}
	return ""
}

// shared returns a referenced handle of the file key names: the one the
// tracker already holds, else path opened and checked to be that inode.
// Callers hold t.mu.
func (t *Tracker) shared(key fileKey, path string) (*os.File, bool) {
	if f, ok := t.hold(key); ok {
		return f, true
	}
	if !filepath.IsAbs(path) {
		return nil, false
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	if !t.share(key, fh) {
		fh.Close()
		return nil, false
	}
	return fh, true
}
