package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"

	"github.com/spanprof/spanprof/internal/elfmap"
	"github.com/spanprof/spanprof/internal/gopclntab"
)

// DebugFetcher fetches separate debug files by build ID out of band
// (internal/debuginfod). Both methods must return at once: they are
// called while a profile is symbolized, never waiting for the network.
type DebugFetcher interface {
	// Cached returns the path of a debug file already fetched.
	Cached(buildID string) (path string, ok bool)
	// Request asks for the debug file in the background; Cached reports
	// it once it arrived.
	Request(buildID string)
}

// Stats counts what the Symbolizer did, so that no rejected debug file or
// failed parse goes unnoticed.
type Stats struct {
	Parsed  uint64 // objects parsed
	Evicted uint64 // objects dropped from the cache
	// Expired counts the evicted objects that went because they were
	// idle (Options.IdleTimeout); the rest went for the bounds.
	Expired uint64
	// DebugFiles counts separate debug files used, DebuginfodFiles those
	// of them that debuginfod supplied.
	DebugFiles      uint64
	DebuginfodFiles uint64
	// DebuginfodRequests counts build IDs handed to the fetcher.
	DebuginfodRequests uint64
	// Rejected debug files, by reason (ErrDebugBuildID, ErrDebugCRC,
	// ErrDebugCorrupt).
	RejectedBuildID uint64
	RejectedCRC     uint64
	RejectedCorrupt uint64
	// DWARFErrors counts debug files whose symbols were kept but whose
	// DWARF line tables could not be read, and compile units or reloads
	// that failed later.
	DWARFErrors uint64
	// DWARFLoads counts loads of DWARF section data: one per object with
	// DWARF, plus one per lookup of an unseen compile unit after Trim
	// released the data.
	DWARFLoads uint64
}

type stats struct {
	// evicted counts the evictions for the bounds, expired the idle ones.
	parsed, evicted, expired, debugFiles, debuginfodFiles, debuginfodRequests atomic.Uint64
	rejBuildID, rejCRC, rejCorrupt, dwarfErrors, dwarfLoads                   atomic.Uint64
}

// Stats returns the counts so far.
func (s *Symbolizer) Stats() Stats {
	st := &s.stats
	// One load of expired, so that Evicted-Expired never goes back.
	expired := st.expired.Load()
	return Stats{
		Parsed: st.parsed.Load(), Evicted: st.evicted.Load() + expired, Expired: expired,
		DebugFiles: st.debugFiles.Load(), DebuginfodFiles: st.debuginfodFiles.Load(),
		DebuginfodRequests: st.debuginfodRequests.Load(),
		RejectedBuildID:    st.rejBuildID.Load(), RejectedCRC: st.rejCRC.Load(),
		RejectedCorrupt: st.rejCorrupt.Load(), DWARFErrors: st.dwarfErrors.Load(),
		DWARFLoads: st.dwarfLoads.Load(),
	}
}

// reject counts a refused debug file by its reason.
func (s *Symbolizer) reject(err error) {
	switch {
	case errors.Is(err, ErrDebugCRC):
		s.stats.rejCRC.Add(1)
	case errors.Is(err, ErrDebugBuildID):
		s.stats.rejBuildID.Add(1)
	default:
		s.stats.rejCorrupt.Add(1)
	}
}

// parse reads the tables of an opened ELF file. A file without .symtab
// gets its separate debug file: from the debug directories and
// .gnu_debuglink, else from the fetcher (which may only request it).
//
// st is the version of the file at openPath, for reading its DWARF again.
// A Go pclntab is claimed from the shared store under key: the object
// returned with a goTable holds one claim.
func (s *Symbolizer) parse(ef *elf.File, st fileStat, id Identity, key, openPath, displayPath string) (*Object, error) {
	s.stats.parsed.Add(1)
	o := &Object{id: id, path: displayPath, progs: ef.Progs}
	files := []*elf.File{ef}
	dwarfFile, dwarfPath, dwarfStat := ef, openPath, st
	if ef.Section(".symtab") == nil || ef.Section(".debug_info") == nil {
		if df, path, src := s.debugFile(ef, id, openPath, displayPath, &o.awaitingDebug); df != nil {
			defer df.Close()
			files = append(files, df)
			// A failed stat leaves a version that never matches: the
			// DWARF is read now but not again after a trim.
			dst, _ := statFile(path)
			dwarfFile, dwarfPath, dwarfStat = df, path, dst
			o.debugSource = src
		}
	}
	o.syms = newSymtab(files...)
	if pt, err := s.pcln.Claim(key, func() (*gopclntab.Table, error) { return gopclntab.Find(ef) }); err == nil {
		gt, err := newGoTable(pt)
		if err != nil {
			s.pcln.Release(key)
			return nil, err
		}
		o.gotab = gt
		o.syms.dropCovered(gt.covers)
	} else if !errors.Is(err, gopclntab.ErrNotFound) {
		return nil, err
	}
	// Go binaries have file and line in the pclntab; their DWARF would
	// only cost memory.
	if o.gotab == nil && s.opts.Mode != ModeNone {
		di, err := guardedLazyDWARF(dwarfFile, dwarfPath, dwarfStat, &s.stats,
			spillOptions{dir: s.opts.DWARFSpillDir, maxBytes: s.opts.DWARFSpillBytes})
		if err != nil {
			s.stats.dwarfErrors.Add(1)
			s.log.Warn("file and line numbers unavailable", "path", displayPath, "error", err)
		}
		o.dwarf = di
	}
	return o, nil
}

// debugFile finds a separate debug file. A binary that has .symtab but
// no DWARF only takes one from the debug directories, for lines; fetching
// over the network is kept for binaries without symbols.
func (s *Symbolizer) debugFile(ef *elf.File, id Identity, openPath, displayPath string, awaiting *bool) (df *elf.File, path, source string) {
	for _, c := range debugCandidates(ef, id, openPath, displayPath, s.opts.DebugDirs) {
		if c.path == openPath {
			continue
		}
		df, err := openDebugFile(c, id)
		if err == nil {
			s.stats.debugFiles.Add(1)
			s.log.Debug("separate debug file", "path", displayPath, "debug", c.path)
			return df, c.path, "local"
		}
		if !errors.Is(err, fs.ErrNotExist) {
			s.reject(err)
			s.log.Warn("reject debug file", "path", displayPath, "error", err)
		}
	}
	if s.opts.Fetcher == nil || id.BuildID == "" || ef.Section(".symtab") != nil {
		return nil, "", ""
	}
	if p, ok := s.opts.Fetcher.Cached(id.BuildID); ok {
		df, err := openDebugFile(debugCandidate{path: p}, id)
		if err == nil {
			s.stats.debugFiles.Add(1)
			s.stats.debuginfodFiles.Add(1)
			return df, p, "debuginfod"
		}
		s.reject(err)
		s.log.Warn("reject debug file from debuginfod", "path", displayPath, "error", err)
		return nil, "", ""
	}
	s.stats.debuginfodRequests.Add(1)
	s.opts.Fetcher.Request(id.BuildID)
	*awaiting = true
	return nil, "", ""
}

// VerifyDebugFile checks that the file at path is a readable debug file
// of the binary with the given build ID; debuginfod uses it to refuse
// what a server sent before caching it.
func VerifyDebugFile(path, buildID string) error {
	df, err := openDebugFile(debugCandidate{path: path}, Identity{BuildID: buildID})
	if err != nil {
		return err
	}
	defer df.Close()
	if got := BuildID(df); got != buildID {
		return fmt.Errorf("check %s: build ID %q, want %s: %w", path, got, buildID, ErrDebugBuildID)
	}
	return nil
}

// guardedLazyDWARF is newLazyDWARF with the reads of mapped sections
// guarded: a file truncated under the mapping gives an error, counted by
// elfmap.Faults, instead of SIGBUS.
func guardedLazyDWARF(ef *elf.File, path string, st fileStat, stats *stats, spill spillOptions) (l *lazyDWARF, err error) {
	ok := true
	defer func() {
		if !ok {
			l, err = nil, errors.New("read DWARF: the file changed under its mapping")
		}
	}()
	defer elfmap.Recover(elfmap.Guard(), &ok)
	return newLazyDWARF(ef, path, st, stats, spill)
}
