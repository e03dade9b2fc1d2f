package browser

import (
	"fmt"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/export/exporttest"
)

// TestTimelineLastAxisLabel: a recording of a round length (2 s) puts the
// last tick at the timeline's right end; its label must be drawn whole,
// inside the canvas, at every width. The box is the label's text measured
// by the browser in the timeline's font; the pixels of the label strip
// show what was drawn.
func TestTimelineLastAxisLabel(t *testing.T) {
	pr := exporttest.Small()
	pr.Start = exporttest.T0
	pr.End = exporttest.T0.Add(2 * time.Second)
	for i := range pr.Samples {
		pr.Samples[i].Time = exporttest.T0.Add(time.Duration(i) * 2 * time.Second / time.Duration(len(pr.Samples)))
	}
	pr.Samples[len(pr.Samples)-1].Time = pr.End
	p := newPage(t, static("round.otlp.json", pr))
	p.open("/")
	for _, width := range []int{1400, 1013, 640} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			p.do(fmt.Sprintf(`document.body.style.width = '%dpx'; spanprof.render()`, width))
			type box struct {
				Text                 string
				X, W, Canvas         float64
				InkFrom, InkTo, Cols int
				TickX                float64
			}
			b := eval[box](p, `(() => {
				const c = document.getElementById('timeline'), tl = spanprof.timeline;
				const last = tl.axisLabels[tl.axisLabels.length - 1];
				const g = document.createElement('canvas').getContext('2d');
				g.font = '11px sans-serif';
				const dpr = window.devicePixelRatio || 1;
				// The label strip: above the tick marks (AXIS-5), below the top.
				const rows = Math.floor((SP.TL.AXIS - 6) * dpr);
				const img = c.getContext('2d').getImageData(0, 0, c.width, rows).data;
				// Ink right of the previous label's start: the last label's.
				const prev = tl.axisLabels[tl.axisLabels.length - 2];
				let from = -1, to = -1;
				for (let x = Math.ceil((prev.x + g.measureText(prev.text).width + 1) * dpr); x < c.width; x++) {
					for (let y = 0; y < rows; y++) {
						const i = (y * c.width + x) * 4;
						// Ink is darker than the page's white background.
						if (img[i + 3] > 0 && img[i] + img[i + 1] + img[i + 2] < 3 * 230) {
							if (from < 0) from = x;
							to = x;
							break;
						}
					}
				}
				return {Text: last.text, X: last.x, W: g.measureText(last.text).width, Canvas: c.clientWidth,
					InkFrom: from, InkTo: to, Cols: c.width, TickX: SP.TL.LABEL + spanprof.model.tMax * tl.scale};
			})()`)
			t.Logf("last label %q at %.1f+%.1f px, canvas %.0f px, tick at %.1f; ink columns %d..%d of %d", b.Text, b.X, b.W, b.Canvas, b.TickX, b.InkFrom, b.InkTo, b.Cols)
			if b.Text != "2.00 s" && b.Text != "2 s" {
				t.Fatalf("last label %q: the recording's 2 s end is not a tick", b.Text)
			}
			if b.X < 0 || b.X+b.W > b.Canvas {
				t.Errorf("last label box %.1f..%.1f outside the canvas (0..%.0f)", b.X, b.X+b.W, b.Canvas)
			}
			if b.InkFrom < 0 {
				t.Fatalf("no ink of the last label in the axis strip")
			}
			if b.InkTo >= b.Cols-1 {
				t.Errorf("the last label's ink reaches the canvas edge (column %d of %d): clipped", b.InkTo, b.Cols)
			}
		})
	}
	p.checkNoErrors()
}
