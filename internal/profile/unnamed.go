package profile

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// Unnamed counts what symbolization left without names in binaries on
// disk: user frames with no function, in a mapping with a file path.
// JIT code, anonymous memory and the kernel are not counted, since no
// debug file could name them.
type Unnamed struct {
	// Samples is the number of samples with at least one such frame.
	Samples int
	// Objects maps each binary's path to its number of such frames.
	Objects map[string]int
}

// CountUnnamed counts p's unnamed frames.
func CountUnnamed(p *Profile) Unnamed {
	u := Unnamed{Objects: map[string]int{}}
	for i := range p.Samples {
		hit := false
		for _, f := range p.Samples[i].Frames {
			if f.Function != "" || f.Mapping == nil || f.Mapping.Kernel || !strings.HasPrefix(f.Mapping.Path, "/") {
				continue
			}
			u.Objects[f.Mapping.Path]++
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

// CountUnnamedFrames counts a's distinct unnamed frames per binary;
// Samples stays 0 (an aggregate's events are grouped).
func (a *Aggregate) CountUnnamedFrames() Unnamed {
	u := Unnamed{Objects: map[string]int{}}
	for _, f := range a.Frames {
		if f.Function == "" && f.Mapping != nil && !f.Mapping.Kernel && strings.HasPrefix(f.Mapping.Path, "/") {
			u.Objects[f.Mapping.Path]++
		}
	}
	return u
}
