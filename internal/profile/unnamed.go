package profile

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// Unnamed counts what symbolization left without symbols in binaries on
// disk: user frames with no function, or with one named only by its
// start in the unwind tables (Frame.NoSymbol), in a mapping with a file
// path. JIT code, anonymous memory and the kernel are not counted, since
// no debug file could name them.
type Unnamed struct {
	// Samples is the number of samples with at least one such frame.
	Samples int
	// Objects maps each binary's path to its number of such frames.
	Objects map[string]int
	// Functions is the number of distinct functions named by their
	// start (module+0xOFF); Addresses the number of distinct addresses
	// left as module+offset, in no function the unwind tables know.
	Functions, Addresses int
}

// lacksSymbol reports whether f is a frame of a binary on disk that no
// symbol named.
func lacksSymbol(f *Frame) bool {
	return (f.Function == "" || f.NoSymbol) && f.Mapping != nil && !f.Mapping.Kernel && strings.HasPrefix(f.Mapping.Path, "/")
}

// tally counts f in u, once per distinct function or address.
func (u *Unnamed) tally(f *Frame, funcs, addrs map[string]bool) {
	u.Objects[f.Mapping.Path]++
	if f.NoSymbol {
		if !funcs[f.Mapping.Path+"\x00"+f.Function] {
			funcs[f.Mapping.Path+"\x00"+f.Function] = true
			u.Functions++
		}
		return
	}
	if k := f.DisplayName(); !addrs[f.Mapping.Path+"\x00"+k] {
		addrs[f.Mapping.Path+"\x00"+k] = true
		u.Addresses++
	}
}

// CountUnnamed counts p's frames without symbols.
func CountUnnamed(p *Profile) Unnamed {
	u := Unnamed{Objects: map[string]int{}}
	funcs, addrs := map[string]bool{}, map[string]bool{}
	for i := range p.Samples {
		hit := false
		for j := range p.Samples[i].Frames {
			f := &p.Samples[i].Frames[j]
			if !lacksSymbol(f) {
				continue
			}
			u.tally(f, funcs, addrs)
			hit = true
		}
		if hit {
			u.Samples++
		}
	}
	return u
}

// String names the binaries, most unnamed frames first, at most three.
func (u Unnamed) String() string {
	paths := make([]string, 0, len(u.Objects))
	for p := range u.Objects {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool {
		if a, b := u.Objects[paths[i]], u.Objects[paths[j]]; a != b {
			return a > b
		}
		return paths[i] < paths[j]
	})
	var names []string
	for i, p := range paths {
		if i == 3 {
			names = append(names, fmt.Sprintf("%d more", len(paths)-3))
			break
		}
		names = append(names, filepath.Base(p))
	}
	return strings.Join(names, ", ")
}

// CountUnnamedFrames counts a's distinct frames without symbols per
// binary; Samples stays 0 (an aggregate's events are grouped).
func (a *Aggregate) CountUnnamedFrames() Unnamed {
	u := Unnamed{Objects: map[string]int{}}
	funcs, addrs := map[string]bool{}, map[string]bool{}
	for i := range a.Frames {
		if f := &a.Frames[i]; lacksSymbol(f) {
			u.tally(f, funcs, addrs)
		}
	}
	return u
}

// CountUnnamed counts the frames of p left without symbols
// (CountUnnamed(p)).
func (p *Profile) CountUnnamed() Unnamed { return CountUnnamed(p) }
