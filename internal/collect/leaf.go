package collect

import (
	"debug/elf"
	"fmt"
	"hash/maphash"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/spanprof/spanprof/internal/proc"
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
	// ReadMemory reads a process's memory at addr into b, for the code
	// of JIT regions; nil reads /proc/PID/mem. A replay (test/replay)
	// reads the code it recorded.
	ReadMemory MemoryReader
	// PACMask holds the pointer-authentication bits of arm64 return
	// addresses (unwind.Stack.PACMask).
	PACMask uint64
	// VDSO is the kernel's vDSO image, whose rules are those of every
	// 64-bit process's [vdso] mapping (the collector sets its own copy);
	// nil leaves [vdso] frames without rules: the kernel's chain there.
	VDSO *symbolize.VDSO

	mu       sync.Mutex
	seedInit sync.Once
	// byMapping remembers the segments and identity of each mapped file,
	// so a new ip or a new process costs map lookups instead of a file
	// open. It names the table rather than holding it, so that the
	// tables of binaries gone idle leave memory with Tables' entries.
	byMapping map[leafKey]leafEntry
	// rules remembers the rule at each address unwound through, by file
	// and file offset (so processes mapping one file share them): samples
	// repeat a small set of hot addresses, and a hit skips the address
	// translation and the table's two searches. nrules counts them all.
	rules  map[leafKey]map[uint64]unwind.Rule
	nrules int
	// chains remembers the kernel's chains a walk confirmed as they were
	// without reading the window (frame pointers all the way), by process
	// and a hash of the chain: such a walk depends on nothing else, and
	// in frame-pointer code nearly every walk is one, so a repeat costs a
	// hash and a comparison instead of a rule lookup per frame.
	chains map[chainKey]confirmed
	seed   maphash.Seed
	// jitRules remembers, by process and address, the rule of JIT code
	// read from its instructions (unwind.EpilogueRule), ok or not:
	// CPython's perf trampolines are a few hundred addresses a process,
	// never rewritten while it runs.
	jitRules map[jitKey]jitRule
}

// jitKey names an address of JIT code in a process.
type jitKey struct {
	p  *proc.Process
	pc uint64
}

type jitRule struct {
	r  unwind.Rule
	ok bool
}

// maxJITRules bounds jitRules; past it the map starts afresh.
const maxJITRules = 65536

// confirmed is a chain a walk confirmed, and how that walk ended.
type confirmed struct {
	chain []uint64
	stop  unwind.Stop
}

// chainKey names a confirmed chain of a process.
type chainKey struct {
	p    *proc.Process
	hash uint64
}

// maxChains bounds chains; past it the map starts afresh.
const maxChains = 16384

// leafKey names a file: its table and segments serve every process
// mapping it, wherever the mapping lies (under churn, each process maps the
// same binary at its own address).
type leafKey struct {
	dev   string
	inode uint64
}

// vdsoKey names the [vdso] mapping's rules, which no file holds: those of
// CFILeafFixer.VDSO.
var vdsoKey = leafKey{dev: "[vdso]"}

// keyOf names the rules of m: its file's, or for the [vdso] mapping of a
// 64-bit process the image's (vdsoKey).
func (f *CFILeafFixer) keyOf(m *proc.Mapping) leafKey {
	if m.Anonymous() && m.Path == "[vdso]" && f.VDSO.Covers(m.Start, m.End) {
		return vdsoKey
	}
	return leafKey{m.Dev, m.Inode}
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

// RecoverCallerLR implements LRLeafFixer: on arm64 a leaf's caller is in
// the link register.
func (f *CFILeafFixer) RecoverCallerLR(p *proc.Process, m *proc.Mapping, ip, lr uint64) (uint64, bool) {
	return unwind.RecoverCallerLR(f.rule(p, m, ip), lr)
}

// rule returns the CFA rule at ip, Unknown when there is none.
func (f *CFILeafFixer) rule(p *proc.Process, m *proc.Mapping, ip uint64) unwind.Rule {
	k := f.keyOf(m)
	f.mu.Lock()
	known := f.rules[k]
	f.mu.Unlock()
	return f.ruleIn(p, m, k, known, ip)
}

// ruleIn is rule with the remembered rules of m's file at hand (nil when
// there are none yet): a walk looks its file's up once per mapping.
func (f *CFILeafFixer) ruleIn(p *proc.Process, m *proc.Mapping, k leafKey, known map[uint64]unwind.Rule, ip uint64) unwind.Rule {
	off := ip - m.Start + m.Offset
	f.mu.Lock()
	r, ok := known[off]
	f.mu.Unlock()
	if ok {
		return r
	}
	r = f.lookup(p, m, k, ip)
	f.mu.Lock()
	f.remember(k, off, r)
	f.mu.Unlock()
	return r
}

func (f *CFILeafFixer) lookup(p *proc.Process, m *proc.Mapping, k leafKey, ip uint64) unwind.Rule {
	path := p.OpenPath(m)
	if k == vdsoKey {
		path = f.VDSO.Path()
	}
	e := f.entry(path, k)
	if e.key == "" {
		return unwind.Rule{}
	}
	vaddr, ok := symbolize.VirtualAddress(e.progs, symMapping(m), ip)
	if !ok {
		return unwind.Rule{}
	}
	// Read again if it was evicted or went idle since.
	t, err := f.Tables.Table(e.key, path)
	if err != nil {
		return unwind.Rule{}
	}
	rule, err := t.RuleAt(vaddr)
	if err != nil {
		return unwind.Rule{}
	}
	return rule
}

func (f *CFILeafFixer) entry(openPath string, k leafKey) leafEntry {
	f.mu.Lock()
	e, ok := f.byMapping[k]
	f.mu.Unlock()
	if ok {
		return e
	}
	// A failure is remembered too (no key): one attempt per mapping.
	e = f.load(openPath)
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
// followed when the frame pointer is the one it walked from, and JIT code
// off the chain is left by its frame-pointer link when that link checks
// out (unwind.Walk).
func (f *CFILeafFixer) Unwind(p *proc.Process, r *sampler.Record, dst []uint64) ([]uint64, unwind.Result) {
	chain := r.UserStack
	key := chainKey{p, maphash.Bytes(f.seedOnce(), unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(chain))), 8*len(chain)))}
	f.mu.Lock()
	if c, ok := f.chains[key]; ok && slices.Equal(c.chain, chain) {
		f.mu.Unlock()
		if len(dst) == 0 {
			return chain, unwind.Result{Stop: c.stop} // no copy: the record's own
		}
		return append(dst, chain...), unwind.Result{Stop: c.stop}
	}
	// The lock is held through the walk but for the rules not known yet,
	// whose tables are read without it: a lock per frame cost more than
	// the rest of the walk.
	var (
		m     *proc.Mapping
		k     leafKey
		known map[uint64]unwind.Rule
	)
	lookup := func(pc uint64) unwind.Rule {
		if m == nil || pc < m.Start || pc >= m.End {
			if m = p.Find(pc); m == nil {
				return unwind.Rule{}
			}
			k = f.keyOf(m)
			known = f.rules[k]
		}
		if m.Anonymous() && k != vdsoKey {
			// Executable memory no file backs, other than the kernel's
			// special regions ([vdso]): a JIT's code, whose frames the
			// walk may leave by their frame-pointer link.
			return unwind.Rule{JIT: m.Path == "" || strings.HasPrefix(m.Path, "[anon")}
		}
		off := pc - m.Start + m.Offset
		if r, ok := known[off]; ok {
			return r
		}
		f.mu.Unlock()
		r := f.lookup(p, m, k, pc)
		f.mu.Lock()
		known = f.remember(k, off, r)
		return r
	}
	jitRule := func(pc uint64) (unwind.Rule, bool) {
		k := jitKey{p, pc}
		if jr, ok := f.jitRules[k]; ok {
			return jr.r, jr.ok
		}
		f.mu.Unlock()
		jr := readJITRule(f.ReadMemory, p, pc)
		f.mu.Lock()
		if f.jitRules == nil || len(f.jitRules) >= maxJITRules {
			f.jitRules = map[jitKey]jitRule{}
		}
		f.jitRules[k] = jr
		return jr.r, jr.ok
	}
	s := unwind.Stack{IP: r.UserIP, SP: r.UserSP, FP: r.UserBP, Window: r.StackTop, Chain: chain,
		LinkRegister: linkRegister, LR: r.UserLR, PACMask: f.PACMask}
	if decodeJIT {
		s.JITRule = jitRule
	}
	frames, res := unwind.Walk(s, lookup, dst, maxUserFrames)
	if res.Needed == 0 && (res.Stop == unwind.StopChainEnd || res.Stop == unwind.StopOutermost) && slices.Equal(frames[len(dst):], chain) {
		if f.chains == nil || len(f.chains) >= maxChains {
			f.chains = map[chainKey]confirmed{}
		}
		f.chains[key] = confirmed{slices.Clone(chain), res.Stop}
	}
	f.mu.Unlock()
	return frames, res
}

func (f *CFILeafFixer) seedOnce() maphash.Seed {
	f.seedInit.Do(func() { f.seed = maphash.MakeSeed() })
	return f.seed
}

// remember stores the rule at a file offset and returns the file's rules.
// Callers hold f.mu.
func (f *CFILeafFixer) remember(k leafKey, off uint64, r unwind.Rule) map[uint64]unwind.Rule {
	if f.rules == nil || f.nrules >= maxRules {
		f.rules, f.nrules = map[leafKey]map[uint64]unwind.Rule{}, 0
	}
	fr := f.rules[k]
	if fr == nil {
		fr = map[uint64]unwind.Rule{}
		f.rules[k] = fr
	}
	if _, ok := fr[off]; !ok {
		fr[off] = r
		f.nrules++
	}
	return fr
}

// decodeJIT says whether the code of JIT regions is decoded as
// unwind.EpilogueRule reads it: x86-64 instructions.
var decodeJIT = runtime.GOARCH == "amd64"

// MemoryReader reads the memory of process pid at addr into b and
// returns how many bytes it read.
type MemoryReader func(pid uint32, addr uint64, b []byte) (int, error)

// ReadProcMemory reads /proc/PID/mem.
func ReadProcMemory(pid uint32, addr uint64, b []byte) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.ReadAt(b, int64(addr))
}

// readJITRule reads the code of p at pc, up to the end of its mapping,
// and decodes the rule there from its instructions (unwind.EpilogueRule).
func readJITRule(read MemoryReader, p *proc.Process, pc uint64) jitRule {
	m := p.Find(pc)
	if m == nil {
		return jitRule{}
	}
	if read == nil {
		read = ReadProcMemory
	}
	code := make([]byte, min(uint64(unwind.MaxEpilogue), m.End-pc))
	got, err := read(p.PID, pc, code)
	if got == 0 && err != nil {
		return jitRule{}
	}
	r, ok := unwind.EpilogueRule(code[:got])
	return jitRule{r, ok}
}
