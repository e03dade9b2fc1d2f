package collect

import (
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/sampler"
)

// TestSampleKeepsItsImageAcrossExec: a sample holds the image it was
// resolved to, so an exec and a report's ForgetExited after it change
// nothing of its symbolization; once the image is gone (its hold dropped
// behind the collector's back), the Build counts the stack and leaves its
// user frames as addresses, never the names of the image that replaced it.
func TestSampleKeepsItsImageAcrossExec(t *testing.T) {
	for _, lost := range []bool{false, true} {
		name := "held"
		if lost {
			name = "image gone"
		}
		t.Run(name, func(t *testing.T) {
			r := newReusedPID(t)
			r.c.Add(r.sample(time.Now())) // this binary's image
			img := r.tr.Get(reusePID)
			if lost {
				r.tr.Release(img.Gen()) // not the collector's doing: a bug it must survive
			}
			r.fp.write(reusePID, false)
			r.c.ProcEvent(sampler.ProcEvent{PID: reusePID, Time: time.Now()})
			r.tr.ForgetExited(time.Now())
			prof := r.c.Build(time.Now())
			if len(prof.Samples) != 1 {
				t.Fatalf("%d samples, want 1", len(prof.Samples))
			}
			var names []string
			for _, f := range prof.Samples[0].Frames {
				names = append(names, f.Function)
			}
			named := strings.Contains(strings.Join(names, " "), "Marker")
			missing := r.c.Stats().ImagesMissing
			if lost {
				if named || missing != 1 {
					t.Errorf("image gone: frames %q, %d stacks counted missing; want addresses only and 1", names, missing)
				}
				for _, f := range prof.Samples[0].Frames {
					if f.Mapping != nil && f.Mapping.Path == r.fp.other {
						t.Errorf("frame %+v placed in the image that replaced the sample's", f)
					}
				}
				return
			}
			if !named || missing != 0 {
				t.Errorf("held: frames %q, %d stacks counted missing; want the image before the exec and 0", names, missing)
			}
			if n := r.tr.Held(); n != 0 {
				t.Errorf("%d images still held after the report", n)
			}
		})
	}
}
