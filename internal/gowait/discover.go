package gowait

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/spanprof/spanprof/internal/tracectx"
)

// Discover adds every Go process it can sample, scanning /proc now and
// then every interval until ctx is done, for recordings of all processes.
// A process that cannot be sampled is not inspected again; the reason is
// logged once.
func (s *Sampler) Discover(ctx context.Context, interval time.Duration) {
	seen := map[uint32]bool{}
	self := uint32(os.Getpid())
	for {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			s.log.Warn("goroutine sampling: list processes", "error", err)
		}
		for _, e := range entries {
			n, err := strconv.ParseUint(e.Name(), 10, 32)
			pid := uint32(n)
			if err != nil || pid == self || seen[pid] {
				continue
			}
			seen[pid] = true
			// Only Go programs that cannot be sampled are worth a log line.
			err = s.Add(pid)
			if errors.Is(err, tracectx.ErrUnsupportedGo) || errors.Is(err, tracectx.ErrNoAllGSymbols) {
				s.log.Info("goroutine sampling: skip Go process", "pid", pid, "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
