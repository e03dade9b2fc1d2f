package pipeline

import (
	"time"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/sampler"
)

// execReader is the tracker as the sampler's reader calls it at an exec,
// in the sampler's types: the sampler comes before the tracker in the flow
// and does not import it.
type execReader struct{ t *proc.Tracker }

func (e execReader) ReadExec(pid uint32, at time.Time, img *sampler.ExecImage) sampler.ExecRead {
	return e.t.ReadExec(pid, at, (*proc.Image)(img))
}

func (e execReader) PlaceExec(pid uint32, at time.Time, img *sampler.ExecImage) sampler.ExecRead {
	return e.t.PlaceExec(pid, at, (*proc.Image)(img))
}
