package collect

import (
	"debug/elf"
	"sync"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/unwind"
)

// CFILeafFixer recovers lost callers from the binaries' CFA rules
// (.eh_frame, .debug_frame, Go pcsp): when the rule at the sampled ip is
// RSP-based, rbp does not hold the function's frame and the return address
// sits at CFA-8 in the stack bytes the kernel copied.
//
// It runs for every sample, so it reads only what it needs of a binary:
// the program headers (to translate addresses), the build ID (to share
// tables between processes) and the unwind table. Symbol tables and DWARF
// wait for the profile to be built.
type CFILeafFixer struct {
	Tables *unwind.Cache

	mu sync.Mutex
	// byMapping remembers the segments and identity of each mapped file,
	// so a new ip or a new process costs map lookups instead of a file
	// open. It names the table rather than holding it, so that the
	// tables of binaries gone idle leave memory with Tables' entries.
	byMapping map[leafKey]leafEntry
	// rules remembers the rule at each sampled ip of a mapping: samples
	// repeat a small set of hot ips, and a hit skips the address
	// translation and the table's two searches.
	rules map[ruleKey]unwind.Rule
}

// leafKey names a file: its table and segments serve every process
// mapping it, wherever the mapping lies (under churn, each process maps the
// same binary at its own address).
type leafKey struct {
	dev   string
	inode uint64
}

// ruleKey names a sampled ip of one mapping of a file.
type ruleKey struct {
	leafKey
	start, ip uint64
}

type leafEntry struct {
	progs []*elf.Prog // PT_LOAD headers only
	key   string      // the file's identity in Tables; empty when unreadable
}

// maxLeafEntries bounds byMapping and maxRules rules; each is dropped and
// refilled past its bound.
const (
	maxLeafEntries = 16384
	maxRules       = 65536
)

// RecoverCaller implements LeafFixer.
func (f *CFILeafFixer) RecoverCaller(p *proc.Process, m *proc.Mapping, ip, sp uint64, stackTop []byte) (uint64, bool) {
	return unwind.RecoverCaller(f.rule(p, m, ip), sp, stackTop)
}

// rule returns the CFA rule at ip, Unknown when there is none.
func (f *CFILeafFixer) rule(p *proc.Process, m *proc.Mapping, ip uint64) unwind.Rule {
	k := ruleKey{leafKey{m.Dev, m.Inode}, m.Start, ip}
	f.mu.Lock()
	r, ok := f.rules[k]
	f.mu.Unlock()
	if ok {
		return r
	}
	r = f.lookup(p, m, k.leafKey, ip)
	f.mu.Lock()
	if f.rules == nil || len(f.rules) >= maxRules {
		f.rules = map[ruleKey]unwind.Rule{}
	}
	f.rules[k] = r
	f.mu.Unlock()
	return r
}

func (f *CFILeafFixer) lookup(p *proc.Process, m *proc.Mapping, k leafKey, ip uint64) unwind.Rule {
	e := f.entry(p, m, k)
	if e.key == "" {
		return unwind.Rule{}
	}
	pm := profile.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset}
	vaddr, ok := symbolize.VirtualAddress(e.progs, &pm, ip)
	if !ok {
		return unwind.Rule{}
	}
	// Read again if it was evicted or went idle since.
	t, err := f.Tables.Table(e.key, p.OpenPath(m))
	if err != nil {
		return unwind.Rule{}
	}
	rule, err := t.RuleAt(vaddr)
	if err != nil {
		return unwind.Rule{}
	}
	return rule
}

func (f *CFILeafFixer) entry(p *proc.Process, m *proc.Mapping, k leafKey) leafEntry {
	f.mu.Lock()
	e, ok := f.byMapping[k]
	f.mu.Unlock()
	if ok {
		return e
	}
	// A failure is remembered too (no key): one attempt per mapping.
	e = f.load(p.OpenPath(m))
	f.mu.Lock()
	if f.byMapping == nil || len(f.byMapping) >= maxLeafEntries {
		f.byMapping = map[leafKey]leafEntry{}
	}
	f.byMapping[k] = e
	f.mu.Unlock()
	return e
}

func (f *CFILeafFixer) load(openPath string) leafEntry {
	ef, err := elf.Open(openPath)
	if err != nil {
		return leafEntry{}
	}
	progs := loadSegments(ef.Progs)
	key := ""
	if id := symbolize.BuildID(ef); id != "" {
		key = "gnu:" + id
	}
	ef.Close()
	if key == "" {
		id, err := symbolize.Identify(openPath)
		if err != nil {
			return leafEntry{}
		}
		key = id.Key()
	}
	return leafEntry{progs: progs, key: key}
}

// Trim drops the unwind tables idle for their IdleTimeout
// (unwind.Cache.Trim).
func (f *CFILeafFixer) Trim() { f.Tables.Trim() }

// loadSegments copies the headers of the PT_LOAD segments, all that
// translating an address needs: an elf.Prog as read carries a reader of
// the file, and an entry stays for every binary sampled.
func loadSegments(progs []*elf.Prog) []*elf.Prog {
	n := 0
	for _, p := range progs {
		if p.Type == elf.PT_LOAD {
			n++
		}
	}
	hdrs := make([]elf.Prog, 0, n)
	out := make([]*elf.Prog, 0, n)
	for _, p := range progs {
		if p.Type == elf.PT_LOAD {
			hdrs = append(hdrs, elf.Prog{ProgHeader: p.ProgHeader})
			out = append(out, &hdrs[len(hdrs)-1])
		}
	}
	return out
}

// maxUserFrames bounds an unwound stack as the kernel's walk is bounded
// (MAX_USER_FRAMES in bpf/spanprof.h).
const maxUserFrames = 127

// Unwind implements StackUnwinder: the hybrid walk of unwind.Walk over
// r's window and the kernel's chain, with the rules of p's mapped files.
// Anonymous code (JIT, the vDSO) has no rules: there the kernel's chain is
// followed when the frame pointer is the one it walked from.
func (f *CFILeafFixer) Unwind(p *proc.Process, r *sampler.Record, dst []uint64) ([]uint64, unwind.Result) {
	lookup := func(pc uint64) unwind.Rule {
		m := p.Find(pc)
		if m == nil || m.Anonymous() {
			return unwind.Rule{}
		}
		return f.rule(p, m, pc)
	}
	s := unwind.Stack{IP: r.UserIP, SP: r.UserSP, FP: r.UserBP, Window: r.StackTop, Chain: r.UserStack}
	return unwind.Walk(s, lookup, dst, maxUserFrames)
}
