package pipeline

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spanprof/spanprof/internal/proc"
)

// ResolvePIDs checks the processes a command names before anything is
// loaded: a thread id stands for its process (samples carry the process
// id, so a thread's own id would match none), and note is told of it;
// repeats count once; and a process whose mappings this process may not
// read is refused with the reason.
func ResolvePIDs(procRoot string, ids []int, note func(id, pid int, comm string)) ([]int, error) {
	var pids []int
	for _, id := range ids {
		pid, err := proc.Resolve(procRoot, id)
		if err != nil {
			if errors.Is(err, proc.ErrNotProcess) {
				return nil, fmt.Errorf("process %d does not exist", id)
			}
			return nil, err
		}
		if pid != id {
			note(id, pid, proc.Comm(procRoot, pid))
		}
		if slices.Contains(pids, pid) {
			continue
		}
		if err := proc.CheckReadable(procRoot, pid); err != nil {
			return nil, err
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// ProcessCPU reads a process's command name and CPU time, in clock ticks,
// from procRoot; ok is false once it is gone.
func ProcessCPU(procRoot string, pid int) (comm string, ticks uint64, ok bool) {
	t, ok := proc.CPUTime(procRoot, pid)
	return proc.Comm(procRoot, pid), t, ok
}
