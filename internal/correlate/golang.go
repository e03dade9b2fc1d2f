package correlate

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/tracectx"
)

// GoLabels returns a GoConfig that derives the goroutine-label offsets of
// a process's executable with tracectx.GoOffsets, cached per file version:
// reading a binary's DWARF costs ~100 ms, and a fleet runs many copies of
// few binaries.
func GoLabels() GoConfig {
	type key struct {
		dev, ino uint64
		size     int64
		mtime    int64
	}
	type entry struct {
		cfg bpf.SamplerProcConfig
		err error
	}
	var mu sync.Mutex
	cache := map[key]entry{}
	return func(pid int, st *unix.Stat_t) (bpf.SamplerProcConfig, error) {
		exe := fmt.Sprintf("/proc/%d/exe", pid)
		if st == nil {
			st = new(unix.Stat_t)
			if err := unix.Stat(exe, st); err != nil {
				return bpf.SamplerProcConfig{}, fmt.Errorf("stat executable: %w", &os.PathError{Op: "stat", Path: exe, Err: err})
			}
		}
		k := key{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano()}
		mu.Lock()
		e, ok := cache[k]
		mu.Unlock()
		if ok {
			return e.cfg, e.err
		}
		info, err := tracectx.GoOffsets(exe)
		switch {
		case errors.Is(err, tracectx.ErrNotGoBinary):
			e.err = ErrNotGo
		case err != nil:
			e.err = err
		default:
			e.cfg = bpf.SamplerProcConfig{
				GoLayout:     uint8(info.Layout),
				GoTlsG:       info.TLSG,
				GoOffM:       info.OffM,
				GoOffCurg:    info.OffCurg,
				GoOffLabels:  info.OffLabels,
				GoOffLockedg: info.OffLockedg,
			}
		}
		mu.Lock()
		if len(cache) > 4096 {
			clear(cache)
		}
		cache[k] = e
		mu.Unlock()
		return e.cfg, e.err
	}
}
